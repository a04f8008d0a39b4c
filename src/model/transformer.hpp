#pragma once
// Decoder-only transformer (Qwen2, Qwen3, Llama) as torch::nn modules, loaded from a Hugging Face
// checkpoint folder by HF tensor names, plus the KV cache and the training log-prob forward.
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/hf_config.hpp"
#include "model/safetensors.hpp"

namespace leap::model {

/// LoRA settings for the attention (q/k/v/o) and MLP (gate/up/down) projections.
struct LoraOptions {
  int64_t rank = 8;
  double alpha = 16.0;
  /// Projection names to adapt ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj").
  std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
};

/// A linear projection with optional bias and an optional LoRA adapter: y = xW^T + b + s * (x A^T) B^T.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias);
  torch::Tensor forward(const torch::Tensor& x);
  /// Adds a LoRA adapter (A ~ kaiming-uniform, B = 0, so the output is unchanged).
  void add_lora(int64_t rank, double alpha);
  bool has_lora() const { return lora_a.defined(); }
  torch::Tensor weight, bias, lora_a, lora_b;
  double lora_scale = 0.0;
};
TORCH_MODULE(Linear);

/// Token embedding table [vocab, hidden].
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t n, int64_t d);
  torch::Tensor forward(const torch::Tensor& ids) { return at::embedding(weight, ids); }
  torch::Tensor weight;
};
TORCH_MODULE(Embedding);

/// RMSNorm computed in fp32, scaled by the weight in the input dtype (as HF).
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
  double eps;
};
TORCH_MODULE(RMSNorm);

/// Rotary embedding tables: inv_freq (fp32) from rope_theta and the rope scaling ("default" or
/// "llama3"; anything else is refused with leap::ModelError).
class Rotary {
 public:
  Rotary() = default;
  explicit Rotary(const ModelConfig& c);
  /// cos and sin [B, T, head_dim] in fp32 for `positions` [B, T] (int64).
  std::pair<torch::Tensor, torch::Tensor> cos_sin(const torch::Tensor& positions) const;
  torch::Tensor inv_freq;  ///< [head_dim / 2] fp32 (CPU until moved with to())
  double attention_scaling = 1.0;
};

/// Key/value cache preallocated for `max_len` positions: per layer [B, Hkv, max_len, D].
/// All rows share one write position `length` (prompts are left padded).
struct KVCache {
  std::vector<torch::Tensor> k, v;
  int64_t length = 0;   ///< positions written so far
  int64_t max_len = 0;
  /// Keeps only the batch rows `rows` (int64 indices on the cache's device).
  void select_rows(const torch::Tensor& rows);
};

/// Keys and values of a batch of shared prefixes (prompt sharing, issue 19): per layer
/// [rows, Hkv, Lp, D] after rotary, with autograd when computed with grad enabled. Unlike a
/// KVCache it is not preallocated or written in place: its tensors are ordinary graph nodes, so
/// gradients flow back through them into the prefix's forward.
struct PrefixKV {
  std::vector<torch::Tensor> k, v;
  torch::Tensor hidden;  ///< [U, Lp - hidden_from, hidden] final hidden states of columns [hidden_from, Lp), for spans in the prefix
  int64_t hidden_from = 0;  ///< the first prefix column whose hidden state is kept
  torch::Tensor tokens;  ///< [U, Lp] int64, the prefix tokens (set by prefix_keys_values)
  /// The rows `rows` (int64 indices [B] on the tensors' device) of every layer's keys and values.
  PrefixKV select_rows(const torch::Tensor& rows) const;
  /// The same prefix without its first `n` columns (0 <= n < Lp; views, no copy): keys, values,
  /// tokens, and the hidden states of the columns kept. For rows whose prefixes are shorter than
  /// Lp - n, these columns are only left padding, so they can attend to the rest alone.
  PrefixKV drop_columns(int64_t n) const;
};

class DecoderLayerImpl;  // attention + MLP block (defined in transformer.cpp)

/// The causal LM. forward() returns final hidden states; logits() applies the LM head.
class TransformerImpl : public torch::nn::Module {
 public:
  explicit TransformerImpl(const ModelConfig& config);

  /// Hidden states after the final norm, [B, T, hidden].
  /// `tokens` [B, T] int64. `positions` [B, T] int64 (rotary positions).
  /// `key_mask` [B, S] bool: which cache+new positions are real tokens (S = cache->length + T if
  /// a cache is given, else T); undefined means every position is real. Attention is causal.
  /// With a cache, the new keys/values are written at cache->length and length advances by T.
  /// With `prefix` (per layer [B, Hkv, Lp, D], no cache allowed) the tokens continue that prefix:
  /// attention sees its Lp keys before the new ones, `key_mask` is [B, Lp + T] and `positions`
  /// must be given. With `collect`, every layer's new keys and values ([B, Hkv, T, D], with
  /// autograd) are appended to it, for use as a later call's prefix. With `keep_from` > 0 only
  /// the hidden states of columns [keep_from, T) are returned, [B, T - keep_from, hidden]: the
  /// last layer computes its queries, attention and MLP only there (its keys and values, and
  /// every earlier layer, still cover all T), which saves a 1 / layers share of the columns
  /// before keep_from. Throws leap::ModelError when a cache and a prefix are both given, the
  /// cache is too short, or keep_from is outside [0, T] or given with a cache.
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                        const torch::Tensor& key_mask = {}, KVCache* cache = nullptr,
                        const PrefixKV* prefix = nullptr, PrefixKV* collect = nullptr, int64_t keep_from = 0);
  /// LM head on hidden states: [..., hidden] -> [..., vocab] in the model dtype.
  torch::Tensor logits(const torch::Tensor& hidden);
  /// One decode step with static shapes (issue 48), the body a CUDA graph captures: nothing in
  /// it reads a host-side length. `tokens` [B, 1] int64 and `positions` [B, 1] int64 (rotary
  /// positions) on the model's device; each layer writes its new key and value into `cache` at
  /// column `column` (int64 [1] on the device, < window) and attends to the cache's first
  /// `window` columns where `key_mask` ([B, >= window] bool, the new column set) is true.
  /// cache.length is neither read nor advanced. Returns hidden states [B, 1, hidden].
  /// Throws leap::ModelError when window exceeds the cache or the shapes do not fit.
  torch::Tensor decode_step(const torch::Tensor& tokens, const torch::Tensor& positions, const torch::Tensor& key_mask,
                            KVCache& cache, const torch::Tensor& column, int64_t window);
  /// Fuses each layer's q/k/v projections into one [q + 2 kv, hidden] weight and gate/up into one
  /// [2 intermediate, hidden] weight (issue 48): a forward then runs one GEMM for each. The
  /// projections' own weights (and biases) become views of the fused tensors, so a later write
  /// to either (load, copy_) is seen by both. For an inference copy: a projection with a LoRA
  /// adapter is refused (leap::ModelError); merge it first (model/rollout_weights.hpp). Call it
  /// after moving the model: to() gives each parameter a tensor of its own again.
  void fuse_projections();
  /// Whether fuse_projections() has run.
  bool projections_fused() const { return fused_; }
  /// forward + logits, converted to fp32.
  torch::Tensor forward_logits(const torch::Tensor& tokens, const torch::Tensor& positions = {},
                               const torch::Tensor& key_mask = {}, KVCache* cache = nullptr);

  /// A cache for `batch` rows and `max_len` positions on the model's device and dtype.
  KVCache make_cache(int64_t batch, int64_t max_len, c10::ScalarType dtype = c10::ScalarType::Undefined) const;

  /// Loads every weight by its HF name; errors (leap::ModelError) name the missing, unexpected
  /// or mis-shaped tensor. lm_head.weight is optional (and ignored) when embeddings are tied.
  void load(const SafetensorsCheckpoint& ckpt);
  /// The weights by HF name (tied lm_head omitted), for saving.
  std::map<std::string, torch::Tensor> hf_state_dict() const;

  /// Recompute each decoder layer in the backward pass instead of storing its activations.
  void set_gradient_checkpointing(bool on) { checkpointing_ = on; }
  bool gradient_checkpointing() const { return checkpointing_; }

  /// Adds LoRA adapters and freezes every other weight (requires_grad false).
  void add_lora(const LoraOptions& opts);
  /// The LoRA tensors by PEFT name ("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").
  std::map<std::string, torch::Tensor> lora_state_dict() const;
  /// Writes the adapter (adapter_model.safetensors + adapter_config.json) to `dir`.
  void save_lora(const std::filesystem::path& dir) const;
  /// Loads an adapter saved by save_lora into the already added adapters (same targets/rank).
  void load_lora(const std::filesystem::path& dir);

  const ModelConfig& config() const { return config_; }
  torch::Device device() const { return embed_tokens->weight.device(); }
  torch::ScalarType dtype() const { return embed_tokens->weight.scalar_type(); }
  /// Number of parameters (tied weights counted once, LoRA excluded).
  int64_t num_parameters() const;

  Embedding embed_tokens{nullptr};
  std::vector<std::shared_ptr<DecoderLayerImpl>> layers;
  RMSNorm norm{nullptr};
  Linear lm_head{nullptr};  ///< null when tied
  Rotary rotary;

 private:
  /// forward's argument checks (throws ModelError naming the conflict); returns the positions
  /// already before `tokens` (the cache's length, or the prefix's).
  int64_t check_forward(const torch::Tensor& tokens, const KVCache* cache, const PrefixKV* prefix,
                        const torch::Tensor& positions, const torch::Tensor& key_mask, int64_t keep_from) const;
  ModelConfig config_;
  bool checkpointing_ = false;
  bool fused_ = false;
};
TORCH_MODULE(Transformer);

/// Checks the config for features leap implements (rope type, activation, sliding window);
/// throws leap::ModelError naming them.
void check_supported(const ModelConfig& c);

/// Loads config.json + safetensors from `dir` into a model of `dtype` on `device`.
Transformer load_transformer(const std::filesystem::path& dir, torch::ScalarType dtype = torch::kFloat32,
                             torch::Device device = torch::kCPU);

/// Per-token log-probs and entropies of the completion.
struct TokenLogProbs {
  torch::Tensor logprobs;  ///< [B, C] fp32, with autograd
  torch::Tensor entropy;   ///< [B, C] fp32
};

/// Log-probs of the last C = completion_len tokens of `tokens` [B, S] (prompt + completion,
/// prompts left padded, completions right padded; `attention_mask` [B, S] marks real tokens,
/// undefined = all real). Positions follow the mask. The LM head + log_softmax run over
/// `chunk` positions at a time, each chunk recomputed in backward, so no [B, S, vocab] fp32
/// tensor is ever held. Logits are divided by `temperature` first.
TokenLogProbs completion_logprobs(Transformer& model, const torch::Tensor& tokens,
                                  const torch::Tensor& attention_mask, int64_t completion_len,
                                  double temperature = 1.0, int64_t chunk = 64);

/// Which positions of a forward's rows are scored (issue 19, several samples in one row): output
/// row k scores the `len` tokens of row row[k] from column start[k] on, each predicted by the
/// column before it. A turn whose context plus completion starts another row's tokens (an
/// earlier turn of the same rollout, or an identical sample) is scored inside that row.
struct ScoreSpans {
  torch::Tensor row;    ///< [M] int64, rows of `tokens`
  torch::Tensor start;  ///< [M] int64, column of the first scored token, in [1, S)
  int64_t len = 1;      ///< C, columns per output row; columns past S - 1 read column S - 1 (mask them out)
};

/// completion_logprobs scoring `spans` instead of the last C columns: returns [M, spans.len]
/// log-probs and entropies. Gradients of positions scored by several outputs add up. Throws
/// c10::Error when a span's row or start is out of range.
TokenLogProbs completion_logprobs(Transformer& model, const torch::Tensor& tokens,
                                  const torch::Tensor& attention_mask, const ScoreSpans& spans,
                                  double temperature = 1.0, int64_t chunk = 64);

/// The keys and values of U shared prefixes (issue 19): `prefix_tokens` [U, Lp] int64, left
/// padded, `prefix_mask` [U, Lp] marking real tokens. Per layer [U, Hkv, Lp, D], with autograd
/// when grad mode is on, for continue_logprobs. The final hidden states are kept from column
/// `hidden_from` on (Lp or more: none, and the last layer computes only its keys and values),
/// for spans that read the prefix.
PrefixKV prefix_keys_values(Transformer& model, const torch::Tensor& prefix_tokens, const torch::Tensor& prefix_mask,
                            int64_t hidden_from = 0);

/// Log-probs of completions that continue shared prefixes: row b continues prefix
/// `prefix_row[b]` (int64 [B]) of `prefix` / `prefix_mask` (from prefix_keys_values) with
/// `tokens` [B, T]: the rest of its prompt (left padded, at least one token) then its completion
/// (right padded), real tokens marked by `attention_mask` [B, T]. Returns the log-probs of the
/// last C = completion_len positions, equal to completion_logprobs on the [prefix | tokens] rows
/// (same positions, same keys) up to float rounding, gradients included (they flow into the
/// prefix's forward through `prefix`).
TokenLogProbs continue_logprobs(Transformer& model, const PrefixKV& prefix, const torch::Tensor& prefix_mask,
                                const torch::Tensor& prefix_row, const torch::Tensor& tokens,
                                const torch::Tensor& attention_mask, int64_t completion_len,
                                double temperature = 1.0, int64_t chunk = 64);

/// continue_logprobs scoring `spans` instead of the last C columns: [M, spans.len]. A span's
/// columns count in the concatenated row [prefix | tokens] of width Lp + T (the prefix's Lp
/// columns first, left padded), so a span may start, or lie whole, inside the shared prefix: a
/// sample whose context (and completion) the prefix holds is scored from the prefix's hidden
/// states, once for all rows. A span crossing from the prefix into the row needs the row's own
/// tokens from column 0 (right padded). Throws c10::Error when a span is out of range.
TokenLogProbs continue_logprobs(Transformer& model, const PrefixKV& prefix, const torch::Tensor& prefix_mask,
                                const torch::Tensor& prefix_row, const torch::Tensor& tokens,
                                const torch::Tensor& attention_mask, const ScoreSpans& spans,
                                double temperature = 1.0, int64_t chunk = 64);

/// prefix_keys_values then continue_logprobs: each of the U prefixes runs once for its B rows.
TokenLogProbs completion_logprobs_shared(Transformer& model, const torch::Tensor& prefix_tokens,
                                         const torch::Tensor& prefix_mask, const torch::Tensor& prefix_row,
                                         const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                         int64_t completion_len, double temperature = 1.0, int64_t chunk = 64);

/// Rotary positions from an attention mask [B, S]: cumsum - 1 (1 at padding, as HF generate).
torch::Tensor positions_from_mask(const torch::Tensor& attention_mask);

/// Runs `fn(inputs)` without storing its graph; recomputes it in backward (activation
/// checkpointing). `params` are the tensors fn closes over that need gradients.
std::vector<torch::Tensor> checkpoint(std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)> fn,
                                      const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& params);

}  // namespace leap::model
