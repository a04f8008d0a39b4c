#pragma once
// What a launch plan may refer to: the task's tensors, size values and constants. The tasks
// layer fills this from task.yaml (with the backend's size overrides applied).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "env/dtype.hpp"

namespace leap::env {

/// A task tensor (input or output).
struct TensorDecl {
  std::string name;
  DType dtype = DType::float32;
  std::vector<std::string> shape;  ///< one expression per dim, over size symbols (e.g. "B", "N")
};

/// How a constant is passed to a kernel.
enum class ScalarType { float32, float64, int64 };

/// A named scalar a launch may pass; int64 constants may also appear in expressions.
struct ConstantDecl {
  std::string name;
  double value = 0;
  ScalarType type = ScalarType::float32;
};

/// The names and values a solution's launch plan is checked and bound against.
struct TaskInterface {
  std::vector<TensorDecl> inputs;    ///< in call order
  std::vector<TensorDecl> outputs;
  std::map<std::string, int64_t> sizes;  ///< size symbol -> value for this backend
  std::vector<ConstantDecl> constants;

  /// The input or output named `name`, or nullptr.
  const TensorDecl* find_tensor(const std::string& name) const;
  /// The constant named `name`, or nullptr.
  const ConstantDecl* find_constant(const std::string& name) const;
};

}  // namespace leap::env
