// leap: entry point. Only wires the subcommands defined in src/cli/ (and the hidden zygote mode
// that starts sandboxed workers, env/zygote.hpp).
#include "cli/app.hpp"
#include "env/zygote.hpp"

int main(int argc, char** argv) {
  if (leap::env::is_zygote_invocation(argc, argv)) return leap::env::zygote_main(argc, argv);
  return leap::cli::run(argc, argv);
}
