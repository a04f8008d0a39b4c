#include "cli/app.hpp"

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <iostream>
#include <map>

#include "cli/commands.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace leap::cli {

void not_built(const std::string& what, const std::string& issue) {
  throw NotBuiltError(what + ": not built yet (arrives with the issue \"" + issue + "\")");
}

int run(int argc, char** argv) {
  CLI::App app{"leap: RL post-training of code models that write GPU kernels.\n"
               "GRPO-style training against a real compile-verify-profile environment, ablations,\n"
               "and every run, rollout, turn and reward in one SQLite file.",
               "leap"};
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("-V,--version", std::string("leap ") + LEAP_VERSION);
  GlobalOptions g;
  app.add_option("--db", g.db, "SQLite store of every run, rollout, turn and reward")->capture_default_str();
  app.add_option("--results-dir", g.results_dir, "folder of per-run logs, checkpoints and plots")
      ->capture_default_str();
  app.add_option("--log-level", g.log_level, "trace, debug, info, warn, error or off")->capture_default_str();

  std::map<CLI::App*, Handler> handlers;
  auto reg = [&](Handler (*add)(CLI::App&, const GlobalOptions&)) {
    size_t before = app.get_subcommands({}).size();
    Handler h = add(app, g);
    handlers[app.get_subcommands({}).at(before)] = std::move(h);
  };
  reg(add_train);
  reg(add_eval);
  reg(add_report);
  reg(add_export);
  reg(add_tasks);
  reg(add_model);
  reg(add_version);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    util::init_logging(g.log_level);
    for (auto* sub : app.get_subcommands()) return handlers.at(sub)();
    return 2;
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace leap::cli
