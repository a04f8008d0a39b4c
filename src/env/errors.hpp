#pragma once
// Errors the environment turns into verdicts: a bad answer format and an impossible launch.
#include <string>

#include "util/error.hpp"

namespace leap::env {

/// The answer does not follow the solution format (missing or unclosed block, bad launch-plan
/// YAML, unknown name, bad expression). The message says what and where; it becomes the
/// feedback of a `format_error` verdict.
class FormatError : public Error {
 public:
  explicit FormatError(const std::string& what) : Error(what, 1) {}
};

/// A launch plan that parses but cannot be launched with the task's sizes (unknown kernel,
/// non-positive or too large grid/block, too much shared memory or scratch, division by zero
/// in a launch expression). Becomes a `launch_error` verdict.
class LaunchError : public Error {
 public:
  explicit LaunchError(const std::string& what) : Error(what, 1) {}
};

}  // namespace leap::env
