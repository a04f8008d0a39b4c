#pragma once
// The only model-layer bridge between safetensors views and LibTorch tensors.
#include <map>
#include <string>
#include <torch/types.h>

#include "model/dtype.hpp"
#include "model/safetensors.hpp"
#include "model/safetensors_writer.hpp"

namespace leap::model {

/// The torch scalar type for `dt` (BF16 -> kBFloat16, BOOL -> kBool, U8 -> kByte, ...).
torch::ScalarType to_torch_dtype(DType dt) noexcept;

/// The safetensors dtype for `st`. Throws leap::ModelError for a type safetensors-leap cannot
/// store (complex, float8, unsigned > 8 bits, ...).
DType from_torch_dtype(torch::ScalarType st);

/// A CPU tensor with the view's dtype and shape.
/// copy == true (default): a contiguous owned copy (safe to write, independent of the mapping).
/// copy == false: zero-copy over the private mapping; it keeps the mapping alive through
/// `view.owner`. Writes to it stay in this process (copy-on-write), but prefer copy for anything
/// you mutate. Throws leap::ModelError naming the tensor if the view has no data but nbytes > 0.
torch::Tensor to_torch(const TensorView& view, bool copy = true);

/// Collects CPU views of `tensors` for write_safetensors. Each tensor must be contiguous and on
/// the CPU; they must outlive the returned map. Throws leap::ModelError naming the tensor
/// otherwise.
std::map<std::string, TensorBytes> tensor_bytes(const std::map<std::string, torch::Tensor>& tensors);

}  // namespace leap::model
