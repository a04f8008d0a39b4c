#pragma once
// Marks a run failed when the training process dies of a fatal signal or std::terminate.
//
// While a CrashGuard lives, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT and std::terminate run a
// handler that forks and execs `leap __leap_mark_failed DB RUN PID REASON` (fork, execve and
// waitpid only: nothing that could deadlock on a lock the dying thread holds), waits for it, then
// lets the process die of the same signal. The helper marks the run `failed` with an `error`
// event, but only while the run is still `running` under this process's lease. Best effort: a
// process that cannot fork any more (or SIGKILL) leaves the run `running`, and `--resume` takes
// its stale lease over.
#include <string>

namespace leap::rl {

/// Installs the handlers for run `run_id` of the store at `db_path` (see the file comment).
/// One guard at a time per process; the previous handlers come back on destruction.
class CrashGuard {
 public:
  CrashGuard(const std::string& db_path, const std::string& run_id);
  ~CrashGuard();
  CrashGuard(const CrashGuard&) = delete;
  CrashGuard& operator=(const CrashGuard&) = delete;
};

/// For a second SIGINT (the user insists on stopping now), called from the signal handler: starts
/// the helper to mark the guarded run `interrupted` with an `interrupt` event (only while it is
/// `running` under this process's lease, as for a crash) and ends the process with status 130
/// at once (_exit: no destructors), without waiting: the helper may need a store lock this
/// process holds, which its exit releases; the mark lands just after the exit. Without a guard (before the run row exists) it only exits. The run
/// resumes from its last checkpoint (`--resume` redoes the steps after it).
[[noreturn]] void interrupt_exit_now();

/// True when argv asks for the helper (argv[1] == "__leap_mark_failed").
bool is_mark_failed_invocation(int argc, char** argv);
/// The helper's main: `__leap_mark_failed DB RUN PID REASON [interrupted]`: marks the run `failed`
/// with an `error` event, or with `interrupted` `interrupted` with an `interrupt` event. Returns 0
/// when it marked the run, 1 when it did not (another status, another holder, or an error).
int mark_failed_main(int argc, char** argv);

}  // namespace leap::rl
