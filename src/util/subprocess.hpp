#pragma once
// Running a child program with a wall-clock limit and captured output (fork + execvp).
#include <string>
#include <vector>

namespace leap::util {

/// Options for `run_process`.
struct ProcessOptions {
  std::string cwd;                  ///< working directory of the child; empty = inherit
  double timeout_s = 0;             ///< wall-clock limit in seconds; <= 0 = none
  size_t max_output_bytes = 1 << 20;///< output kept (bytes); the rest is read and dropped
};

/// What `run_process` observed.
struct ProcessResult {
  int exit_code = -1;      ///< exit status when the child exited normally, else -1
  int term_signal = 0;     ///< signal that ended the child (0 if it exited)
  bool timed_out = false;  ///< true if the limit was hit and the process group was killed
  bool exec_failed = false;///< true if execvp itself failed (program not found, ...)
  bool truncated = false;  ///< true if output beyond max_output_bytes was dropped
  std::string output;      ///< stdout and stderr, interleaved as written
  double wall_s = 0;       ///< seconds from start to reap

  /// True for a normal exit with status 0.
  bool ok() const { return !timed_out && term_signal == 0 && exit_code == 0; }
};

/// Runs `argv` (argv[0] looked up in PATH) with stdin from /dev/null and stdout+stderr captured.
/// The child leads its own process group; on timeout the whole group (compiler drivers spawn
/// helpers) gets SIGKILL. Throws leap::Error only for failures of the parent (pipe, fork).
ProcessResult run_process(const std::vector<std::string>& argv, const ProcessOptions& options = {});

/// Runs `argv` (argv[0] looked up in PATH) in the foreground with the parent's stdin, stdout and
/// stderr, and waits for it. Returns the exit status, 128 + signal if a signal ended it, or 127
/// if the program could not be started. Throws leap::Error only for a failed fork.
int run_foreground(const std::vector<std::string>& argv);

}  // namespace leap::util
