#include "support.hpp"

#include "model/tiny_model.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace leap::test {

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  path = std::filesystem::temp_directory_path() /
         ("leap-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" + std::to_string(rd() % 100000));
  std::filesystem::create_directories(path);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

std::string TempDir::write(const std::string& name, const std::string& text) const {
  auto p = path / name;
  std::filesystem::create_directories(p.parent_path());
  std::ofstream(p) << text;
  return p.string();
}

std::string leap_binary() {
  if (const char* env = std::getenv("LEAP_BINARY")) return env;
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "leap").string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

RunResult run_leap(const std::string& args, const std::string& env_prefix) {
  TempDir tmp;
  std::string out = (tmp.path / "out").string(), err = (tmp.path / "err").string();
  std::string cmd = "cd '" LEAP_SOURCE_DIR "' && " + env_prefix + " '" + leap_binary() + "' " + args + " </dev/null >'" + out +
                    "' 2>'" + err + "'";
  int status = std::system(cmd.c_str());
  RunResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

const std::filesystem::path& tiny_model() {
  static TempDir dir;
  static bool made = false;
  if (!made) {
    // One literal, and the path built apart: GCC 12 warns a false -Warray-bounds on the temporaries.
    const std::filesystem::path out = dir.path / "tiny";
    model::init_tiny_model(out, LEAP_SOURCE_DIR "/tasks/starter", "tiny", 3);
    made = true;
  }
  return dir.path;
}

void exec_in_source_dir(const std::vector<std::string>& argv) {
  if (chdir(LEAP_SOURCE_DIR) != 0) _exit(126);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  execv(args[0], args.data());
  _exit(127);
}

}  // namespace leap::test
