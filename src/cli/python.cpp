#include "cli/python.hpp"

#include <cstdlib>
#include <filesystem>

#include "util/error.hpp"
#include "util/subprocess.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

#ifndef LEAP_BUILD_PYTHON
#define LEAP_BUILD_PYTHON ""
#endif

namespace leap::cli {

namespace fs = std::filesystem;

std::string find_python() {
  if (const char* e = std::getenv("LEAP_PYTHON"); e && *e) return e;
  fs::path venv = fs::path(LEAP_SOURCE_DIR) / ".venv" / "bin" / "python";
  if (fs::exists(venv)) return venv.string();
  if (fs::exists(LEAP_BUILD_PYTHON)) return LEAP_BUILD_PYTHON;
  return "python3";
}

std::string tool_script(const std::string& name) {
  const char* e = std::getenv("LEAP_TOOLS_DIR");
  fs::path p = fs::path(e && *e ? e : std::string(LEAP_SOURCE_DIR) + "/tools") / name;
  if (!fs::exists(p)) throw Error("tool script " + p.string() + " is missing (set LEAP_TOOLS_DIR to leap's tools/ folder)");
  return p.string();
}

int run_python_tool(const std::string& tool, const std::vector<std::string>& args) {
  const std::string python = find_python();
  std::vector<std::string> argv = {python, tool_script(tool)};
  argv.insert(argv.end(), args.begin(), args.end());
  const int rc = util::run_foreground(argv);
  if (rc == 127)
    throw Error("Python not found: '" + python + "' cannot be run. Run scripts/setup.sh (it creates .venv with "
                "torch) or set LEAP_PYTHON to a python that has torch");
  if (rc == 4)
    throw Error("'" + python + "' has no torch (see the message above). Run scripts/setup.sh or set LEAP_PYTHON to a "
                "python that has torch");
  return rc;
}

}  // namespace leap::cli
