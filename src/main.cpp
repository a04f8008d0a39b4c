// leap: entry point. Only wires the subcommands defined in src/cli/ (and two hidden modes: the
// zygote that starts sandboxed workers, env/zygote.hpp, and the helper that marks a crashed run
// failed, rl/crash_guard.hpp).
#include "cli/app.hpp"
#include "env/zygote.hpp"
#include "rl/crash_guard.hpp"
#include "util/omp_policy.hpp"

int main(int argc, char** argv) {
  if (leap::env::is_zygote_invocation(argc, argv)) return leap::env::zygote_main(argc, argv);
  if (leap::rl::is_mark_failed_invocation(argc, argv)) return leap::rl::mark_failed_main(argc, argv);
  leap::util::ensure_short_omp_spin(argc, argv);  // may restart the process (libgomp reads it at load)
  return leap::cli::run(argc, argv);
}
