// Attention of one new token per row against a KV cache on the CPU (the decode step of
// generate()), without SDPA's per-row, per-head matrix-vector calls.
#pragma once

#include <ATen/core/Tensor.h>

namespace leap::model {

/// Whether decode_attention_cpu() can take these inputs: all on the CPU in float32, one query
/// position (q [B, H, 1, D]), k and v [B, Hkv, S, D] with H a multiple of Hkv, D a multiple of 8,
/// and a mask that is undefined or bool broadcastable to [B, 1, 1, S]. Elsewhere (GPU, bf16,
/// prefill, training) the caller uses SDPA.
bool decode_attention_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& mask);

/// softmax(q k^T / sqrt(D), masked) v for one query position per row, grouped-query heads
/// (query head h reads key/value head h / (H / Hkv)), computed directly on the cache's strided
/// rows with one pass per (row, key/value head) pair, parallel over pairs.
/// q [B, H, 1, D] float32; k, v [B, Hkv, S, D] float32 (views of the cache, last dim contiguous
/// or not); mask undefined or bool, broadcastable to [B, 1, 1, S] (true = attend). Returns
/// [B, H, 1, D] float32, equal to at::scaled_dot_product_attention(q, k, v, mask, 0, false,
/// nullopt, enable_gqa=true) up to float rounding. A row whose keys are all masked gets zeros.
/// Throws c10::Error when decode_attention_supported() is false.
at::Tensor decode_attention_cpu(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& mask);

}  // namespace leap::model
