#pragma once
// Helpers shared by the tests: temporary folders, files, and running the `leap` binary.
#include <filesystem>
#include <string>
#include <vector>

namespace leap::test {

/// A fresh folder under the system temp dir, removed with its content on destruction.
struct TempDir {
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path path;
  /// Writes `text` to `name` inside the folder and returns the file's path.
  std::string write(const std::string& name, const std::string& text) const;
};

/// Exit status and captured output of one `leap` run.
struct RunResult {
  int rc = -1;
  std::string out;
  std::string err;
};

/// Path of the `leap` binary built beside the test binary.
std::string leap_binary();

/// Runs `leap ARGS` through the shell (ARGS is shell text) from the source folder, with an
/// empty stdin; captures stdout and stderr. `env_prefix` (shell text) goes before the binary, e.g.
/// "env -u OMP_WAIT_POLICY".
RunResult run_leap(const std::string& args, const std::string& env_prefix = "");

/// In a forked child: changes to the source folder and execs `argv` (argv[0] a path); never
/// returns (_exit 126 when the folder, 127 when the exec fails).
[[noreturn]] void exec_in_source_dir(const std::vector<std::string>& argv);

/// Reads a whole file (empty when missing).
std::string read_file(const std::string& path);

/// A folder holding `tiny/`: the tiny model (`leap model init --preset tiny`, seed 3, tokenizer
/// trained on tasks/starter), made once per test process and removed at exit.
const std::filesystem::path& tiny_model();

}  // namespace leap::test
