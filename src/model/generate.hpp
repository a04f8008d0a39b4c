#pragma once
// Batched autoregressive generation with a preallocated KV cache.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/tokenizer.hpp"
#include "model/transformer.hpp"

namespace leap::model {

/// How generate() runs its decode steps (issue 48).
enum class DecodeMode {
  /// Graph on a GPU when the compute dtype is the weights' (no autocast), Static on a GPU
  /// otherwise, Dynamic on a CPU.
  Auto,
  /// Finished rows are dropped from the batch and the KV cache (the cheapest on a CPU).
  Dynamic,
  /// A fixed batch and KV cache: finished rows are masked, not removed; positions, the cache
  /// column and the key mask are updated on the device; the host reads each step's tokens
  /// through one asynchronous copy while the next step runs. Attention reads the cache up to the
  /// written columns rounded up to window_block. The same tokens as Dynamic (greedy and seeded).
  Static,
  /// Static with each decode step (forward + LM head) captured in a CUDA graph once per window
  /// and replayed. CUDA only, and only without autocast (compute dtype = the weights' dtype);
  /// else generate() throws ModelError.
  Graph,
};

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
  DecodeMode decode = DecodeMode::Auto;  ///< how decode steps run (issue 48)
  /// Static / Graph: attention reads the KV cache's first written-columns-rounded-up-to-this
  /// columns (one CUDA graph per such window). At least 1.
  int64_t window_block = 256;
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
/// sample_with_noise with sampling_noise(B, V, ...) drawn from `gen`.
std::pair<torch::Tensor, torch::Tensor> sample_next(const torch::Tensor& logits, const SamplingParams& params,
                                                    at::Generator& gen);

/// The random numbers of one sampling step for `rows` rows over `vocab` tokens on `device`,
/// drawn from `gen`: on a CPU one uniform per row, [rows, 1] float64 (inverse-CDF sampling,
/// cheaper there than a variate per token); on a GPU one Exp(1) variate per row and token,
/// [rows, vocab] float32 (the exponential race: no sort, cumulative sum or search). Undefined
/// when `temperature` <= 0 (greedy). generate() draws them for every row of its batch at every
/// step, finished rows included, so a row's samples do not depend on when the others stop.
torch::Tensor sampling_noise(int64_t rows, int64_t vocab, const torch::Device& device, double temperature,
                             at::Generator& gen);

/// Picks the next tokens from fp32 logits [B, V] after temperature, top-k and top-p. `noise`
/// [B, 1] uniforms in [0, 1): inverse CDF over the kept probabilities (float64); [B, V] Exp(1)
/// variates: argmax(p / E), which draws each token with probability p exactly (float32); undefined:
/// greedy. Returns (tokens [B] int64, log-probs [B] fp32 under softmax(logits / T), before
/// top-k / top-p; T = 1 when greedy). A token cut by top-k / top-p is never drawn.
std::pair<torch::Tensor, torch::Tensor> sample_with_noise(const torch::Tensor& logits, const SamplingParams& params,
                                                          const torch::Tensor& noise);

}  // namespace leap::model
