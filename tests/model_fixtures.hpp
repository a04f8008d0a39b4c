#pragma once
// Helpers for the model-layer tests: run the project's Python (with tokenizers / safetensors /
// transformers installed by scripts/setup.sh) to make reference fixtures in a temp folder.
#include <doctest/doctest.h>

#include <ftw.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace leap_test {

/// The venv python: $LEAP_PYTHON, else LEAP_SOURCE_DIR/.venv/bin/python.
inline std::string venv_python() {
  if (const char* p = std::getenv("LEAP_PYTHON"); p != nullptr && *p != '\0') return p;
  return std::string(LEAP_SOURCE_DIR) + "/.venv/bin/python";
}

/// A fresh temporary folder, removed at exit of the scope.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "leap-model-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  // Not std::filesystem::remove_all: libtorch.so exports its own copy of that symbol, which
  // crashes when it is bound instead of libstdc++'s.
  ~TempDir() {
    ::nftw(path.c_str(), [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); },
           16, FTW_DEPTH | FTW_PHYS);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// Runs `python tools/<script> <args>`; returns its exit status and puts stdout+stderr in *log.
/// Fails the test (not skips) with a clear message when the venv python or the named modules
/// are missing, since these tests are the parity checks against HF.
inline int run_tool(const std::string& script, const std::string& args, const std::string& modules,
                    std::string* log) {
  const std::string py = venv_python();
  if (!std::filesystem::exists(py))
    FAIL("no project python at " << py
                                 << ": run scripts/setup.sh (or set LEAP_PYTHON) so the model parity "
                                    "tests can make their reference fixtures");
  TempDir logdir;
  const auto logfile = logdir.path / "log.txt";
  const std::string cmd = shell_quote(py) + " " + shell_quote(std::string(LEAP_SOURCE_DIR) + "/tools/" + script) +
                          " " + args + " >" + shell_quote(logfile.string()) + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(logfile);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (log) *log = ss.str();
  const int status = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
  if (status != 0 && ss.str().find("ModuleNotFoundError") != std::string::npos)
    FAIL(py << " cannot import " << modules
            << ": install the pinned packages (scripts/setup.sh) so the model parity tests can run\n"
            << ss.str());
  return status;
}

/// Reads a JSON file (test helper; fails the test on error).
inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "cannot read " << p);
  return nlohmann::json::parse(in);
}

}  // namespace leap_test
