// Inference-only CPU kernels for the small elementwise chains of a decode step (RMSNorm,
// rotary embedding): one pass instead of five or six tensor ops, each of which costs a dispatch
// and an allocation that outweigh the arithmetic at the tiny model's sizes.
#pragma once

#include <ATen/core/Tensor.h>

namespace leap::model {

/// Whether the fused kernels below may replace the tensor-op path for these tensors: every one
/// defined is a CPU float32 tensor, and no gradient is wanted (grad mode off, or none requires
/// one).
bool cpu_fused_ok(std::initializer_list<const at::Tensor*> tensors);

/// RMSNorm of the last dimension: weight * x / sqrt(mean(x^2) + eps), in float32.
/// x [..., N] float32 CPU, weight [N] float32 CPU. Returns a new contiguous tensor of x's shape.
/// Equal to the HF formula (the tensor-op path in transformer.cpp) up to float rounding.
/// Throws c10::Error on other dtypes, devices or shapes.
at::Tensor rms_norm_cpu(const at::Tensor& x, const at::Tensor& weight, double eps);

/// Rotary embedding: x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] for the halves
/// x1, x2 of the last dimension. x [B, H, T, D] float32 CPU (any strides); cos, sin [B, 1, T, D]
/// float32 CPU. Returns a new contiguous [B, H, T, D]. Throws c10::Error on other inputs.
at::Tensor rotary_cpu(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace leap::model
