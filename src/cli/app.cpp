#include "cli/app.hpp"

#include <CLI/CLI.hpp>
#include <iostream>
#include <torch/version.h>

namespace leap::cli {
int run(int argc, char** argv) {
  CLI::App app{"leap"};
  app.require_subcommand(1);
  auto* v = app.add_subcommand("version", "print version");
  v->callback([] { std::cout << "leap " << LEAP_VERSION << " torch " << TORCH_VERSION << "\n"; });
  CLI11_PARSE(app, argc, argv);
  return 0;
}
}  // namespace leap::cli
