#pragma once
// Leaving the process at once from any thread when it cannot go on (a reference that never
// returns), after telling the user and the run's store (the hook a run installs).
#include <string>

namespace leap::util {

/// What to do just before a fatal exit: a plain function (it may run on any thread while other
/// threads are stuck), e.g. rl::CrashGuard marking the run failed. nullptr removes it.
void set_fatal_exit_hook(void (*hook)(const char* reason));

/// Prints "leap: error: MESSAGE" to stderr, runs the hook with `message`, and ends the process
/// with `code` (_exit: no destructors, since other threads may be stuck inside LibTorch).
[[noreturn]] void fatal_exit(const std::string& message, int code = 1);

/// Marks that the user asked the process to stop (SIGINT/SIGTERM); see interrupt_requested_at.
void note_interrupt();
/// Seconds since the epoch of the first note_interrupt(), or 0 when none came.
double interrupt_requested_at();

}  // namespace leap::util
