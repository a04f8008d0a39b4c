#pragma once
// Finding the Python interpreter (with PyTorch) that leap's tool scripts in tools/ run with.
#include <string>
#include <vector>

namespace leap::cli {

/// The Python to run tools with, first found of: $LEAP_PYTHON; <source dir>/.venv/bin/python; the
/// LEAP_PYTHON the build was configured with; `python3` (looked up in PATH when run).
std::string find_python();

/// Absolute path of tools/<name> in the source tree ($LEAP_TOOLS_DIR overrides the folder).
/// Throws leap::Error when the file is missing.
std::string tool_script(const std::string& name);

/// Runs `python tools/<tool> args...` in the foreground and returns its exit status. Throws
/// leap::Error with the fix when Python cannot be started (exit 127) or reports that torch is
/// missing (the tools exit 4 then).
int run_python_tool(const std::string& tool, const std::vector<std::string>& args);

}  // namespace leap::cli
