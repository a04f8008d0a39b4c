#include "model/safetensors_torch.hpp"

#include <torch/torch.h>

#include <cstring>

#include "util/error.hpp"

namespace leap::model {

torch::ScalarType to_torch_dtype(DType dt) noexcept {
  switch (dt) {
    case DType::F64: return torch::kFloat64;
    case DType::F32: return torch::kFloat32;
    case DType::F16: return torch::kFloat16;
    case DType::BF16: return torch::kBFloat16;
    case DType::I64: return torch::kInt64;
    case DType::I32: return torch::kInt32;
    case DType::I16: return torch::kInt16;
    case DType::I8: return torch::kInt8;
    case DType::U8: return torch::kUInt8;
    case DType::BOOL: return torch::kBool;
  }
  return torch::kFloat32;
}

DType from_torch_dtype(torch::ScalarType st) {
  switch (st) {
    case torch::kFloat64: return DType::F64;
    case torch::kFloat32: return DType::F32;
    case torch::kFloat16: return DType::F16;
    case torch::kBFloat16: return DType::BF16;
    case torch::kInt64: return DType::I64;
    case torch::kInt32: return DType::I32;
    case torch::kInt16: return DType::I16;
    case torch::kInt8: return DType::I8;
    case torch::kUInt8: return DType::U8;
    case torch::kBool: return DType::BOOL;
    default:
      throw ModelError(std::string("torch dtype ") + c10::toString(st) +
                       " has no safetensors equivalent supported by leap");
  }
}

torch::Tensor to_torch(const TensorView& view, bool copy) {
  auto opts = torch::TensorOptions().dtype(to_torch_dtype(view.dtype)).device(torch::kCPU);
  if (view.nbytes == 0) return torch::empty(view.shape, opts);
  if (view.data == nullptr)
    throw ModelError("tensor \"" + view.name + "\": view has no data");
  void* p = const_cast<void*>(view.data);
  const auto align = reinterpret_cast<std::uintptr_t>(p) % dtype_size(view.dtype);
  if (copy || align != 0) {
    // Copy through bytes so an unaligned source is fine.
    torch::Tensor out = torch::empty(view.shape, opts);
    std::memcpy(out.data_ptr(), view.data, view.nbytes);
    return out;
  }
  // The deleter's capture keeps the mapping alive as long as the tensor's storage.
  return torch::from_blob(p, view.shape, [owner = view.owner](void*) {}, opts);
}

std::map<std::string, TensorBytes> tensor_bytes(const std::map<std::string, torch::Tensor>& tensors) {
  std::map<std::string, TensorBytes> out;
  for (const auto& [name, t] : tensors) {
    if (!t.device().is_cpu())
      throw ModelError("tensor \"" + name + "\": must be on the CPU to be written");
    if (!t.is_contiguous())
      throw ModelError("tensor \"" + name + "\": must be contiguous to be written");
    TensorBytes b;
    b.dtype = from_torch_dtype(t.scalar_type());
    b.shape = t.sizes().vec();
    b.bytes = std::span<const std::byte>(static_cast<const std::byte*>(t.data_ptr()), t.nbytes());
    out.emplace(name, std::move(b));
  }
  return out;
}

}  // namespace leap::model
