#pragma once
// Element types of safetensors tensors (torch-free).
#include <cstddef>
#include <string>
#include <string_view>

namespace leap::model {

/// Element type of a stored tensor, as spelled in a safetensors header.
enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

/// Size of one element in bytes (BOOL is 1 byte).
std::size_t dtype_size(DType dt) noexcept;

/// The safetensors spelling ("F32", "BF16", ...).
std::string_view dtype_name(DType dt) noexcept;

/// Parses the safetensors spelling. Throws leap::ModelError naming `context` (file and tensor)
/// and the supported dtypes when `name` is not one of them.
DType parse_dtype(std::string_view name, const std::string& context);

}  // namespace leap::model
