#pragma once
// Element types of task tensors and launch-plan scratch buffers (no LibTorch dependency).
#include <cstddef>
#include <string>
#include <string_view>

namespace leap::env {

/// Tensor element type, named as in task.yaml (`float32`, `int64`, `bool`, ...).
enum class DType { float16, bfloat16, float32, float64, int8, uint8, int16, int32, int64, bool_ };

/// Size of one element in bytes.
size_t dtype_size(DType t);

/// Name as written in task.yaml / launch plans (`bool_` is written `bool`).
std::string_view to_string(DType t);

/// Parses a dtype name; accepts the canonical names plus the aliases `half`, `float`, `double`,
/// `int`, `long`, `fp16`, `bf16`, `fp32`, `fp64`. Returns false for anything else.
bool dtype_from_string(std::string_view text, DType& out);

/// Comma-separated list of the canonical names, for error messages.
std::string dtype_names();

/// The C/C++ element type a kernel parameter for this dtype would use (`float`, `int64_t`, ...;
/// `__half` / `__nv_bfloat16` for the half types).
std::string_view c_type_name(DType t);

}  // namespace leap::env
