#pragma once
// Batched autoregressive generation with a preallocated KV cache.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer.hpp"
#include "model/transformer.hpp"

namespace leap::model {

/// How to sample. temperature <= 0 means greedy (argmax).
struct SamplingParams {
  double temperature = 1.0;
  double top_p = 1.0;    ///< nucleus mass kept (1 = off)
  int64_t top_k = 0;     ///< keep the k most likely tokens (0 = off)
  int64_t max_new_tokens = 128;
  std::vector<int64_t> stop_ids;         ///< a sequence ends after emitting one of these (kept in the output)
  std::vector<std::string> stop_strings; ///< a sequence ends once its decoded completion contains one (needs a tokenizer)
  uint64_t seed = 0;     ///< seeds the sampling generator (same seed + inputs = same samples)
  /// Compute dtype of the forward passes (autocast on the model's device type) and dtype of the
  /// KV cache, e.g. kBFloat16 for fp32 master weights on a GPU: decode reads half the bytes and
  /// attention can use fused kernels. Undefined (default): the weights' dtype, no autocast.
  c10::ScalarType compute_dtype = c10::ScalarType::Undefined;
  /// Identical prompts (a GRPO group's samples) are prefilled once and their rows decode from
  /// copies of that cache (issue 19); the output is the same as without. false: every row is
  /// prefilled on its own.
  bool share_prefill = true;
};

/// Why a sequence stopped.
enum class FinishReason { Length, StopToken, StopString };
const char* finish_reason_name(FinishReason r) noexcept;

/// One generated completion.
struct Completion {
  std::vector<int64_t> tokens;   ///< new tokens (including the stop token if any)
  std::vector<float> logprobs;   ///< log-prob of each new token under softmax(logits / T) (T = 1 when greedy), before top-k/top-p
  FinishReason finish = FinishReason::Length;
  std::string text;              ///< decoded completion (only when a tokenizer was given)
};

/// Generates a completion for every prompt (different lengths allowed: they are left padded,
/// positions follow the attention mask). Finished sequences are dropped from the batch.
/// `tok` is needed for stop_strings and to fill Completion::text; may be null otherwise.
std::vector<Completion> generate(Transformer& model, const std::vector<std::vector<int64_t>>& prompts,
                                 const SamplingParams& params, const Tokenizer* tok = nullptr);

/// Picks the next tokens from fp32 logits [B, V]; returns (tokens [B] int64, logprobs [B] fp32).
std::pair<torch::Tensor, torch::Tensor> sample_next(const torch::Tensor& logits, const SamplingParams& params,
                                                    at::Generator& gen);

}  // namespace leap::model
