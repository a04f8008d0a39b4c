// The decoder: Linear / RMSNorm / rotary / attention / MLP / layers and TransformerImpl's forward
// (model/transformer.hpp). Elsewhere: its weights from a Hugging Face folder
// (transformer_weights.cpp), LoRA adapters (lora.cpp), gradient checkpointing
// (gradient_checkpoint.cpp), log-prob scoring (logprobs.cpp).
#include "model/transformer.hpp"

#include <cmath>
#include <limits>

#include <ATen/autocast_mode.h>

#include "model/autocast.hpp"
#include "model/cpu_fused.hpp"
#include "model/decode_attention.hpp"
#include "util/error.hpp"

namespace leap::model {

namespace {

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

/// The tensors `parts` (same trailing shape) concatenated along dim 0 into one new tensor; each
/// part then becomes a view of its rows (set_data), so the fused tensor and the parts share
/// storage. Returns the fused tensor, without autograd.
torch::Tensor fuse_rows(std::initializer_list<torch::Tensor*> parts) {
  std::vector<torch::Tensor> ts;
  for (auto* p : parts) ts.push_back(p->detach());
  auto fused = torch::cat(ts, 0);
  int64_t row = 0;
  for (auto* p : parts) {
    const int64_t n = p->size(0);
    p->set_data(fused.narrow(0, row, n));
    row += n;
  }
  return fused;
}

}  // namespace

// ---- Linear / RMSNorm / Embedding --------------------------------------------------------

LinearImpl::LinearImpl(int64_t in, int64_t out, bool has_bias) {
  weight = register_parameter("weight", torch::empty({out, in}));
  if (has_bias) bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  auto y = at::linear(x, weight, bias);
  if (lora_a.defined()) y = y + at::linear(at::linear(x, lora_a), lora_b) * lora_scale;
  return y;
}

void LinearImpl::add_lora(int64_t rank, double alpha) {
  auto opts = weight.options();
  auto a = torch::empty({rank, weight.size(1)}, opts);
  torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));
  lora_a = register_parameter("lora_a", a);
  lora_b = register_parameter("lora_b", torch::zeros({weight.size(0), rank}, opts));
  lora_scale = alpha / static_cast<double>(rank);
}

RMSNormImpl::RMSNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (cpu_fused_ok({&x, &weight})) return rms_norm_cpu(x, weight, eps);
  auto h = x.to(torch::kFloat32);
  auto var = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * torch::rsqrt(var + eps);
  return weight * h.to(x.scalar_type());
}

EmbeddingImpl::EmbeddingImpl(int64_t n, int64_t d) { weight = register_parameter("weight", torch::empty({n, d})); }

// ---- Rotary ------------------------------------------------------------------------------

void check_supported(const ModelConfig& c) {
  const auto& t = c.rope_scaling.type;
  if (t != "default" && t != "llama3")
    throw ModelError("model_type " + c.model_type_name + ": rope scaling type '" + t +
                     "' is not implemented (leap supports: default, llama3)");
  if (c.hidden_act != "silu")
    throw ModelError("model_type " + c.model_type_name + ": hidden_act '" + c.hidden_act +
                     "' is not implemented (leap supports: silu)");
  if (c.use_sliding_window)
    throw ModelError("model_type " + c.model_type_name + ": use_sliding_window is not implemented");
  if (c.head_dim % 2 != 0) throw ModelError("head_dim must be even for rotary embeddings");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw ModelError("num_attention_heads must be a multiple of num_key_value_heads");
}

Rotary::Rotary(const ModelConfig& c) {
  const int64_t dim = c.head_dim;
  auto idx = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32);
  inv_freq = 1.0 / torch::pow(c.rope_theta, idx / static_cast<double>(dim));
  if (c.rope_scaling.type == "llama3") {
    const auto& r = c.rope_scaling;
    const double old_ctx = static_cast<double>(r.original_max_position_embeddings);
    const double low_wl = old_ctx / r.low_freq_factor, high_wl = old_ctx / r.high_freq_factor;
    auto wavelen = 2 * M_PI / inv_freq;
    auto llama = torch::where(wavelen > low_wl, inv_freq / r.factor, inv_freq);
    auto smooth = (old_ctx / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    auto smoothed = (1 - smooth) * llama / r.factor + smooth * llama;
    auto medium = (wavelen >= high_wl).logical_and(wavelen <= low_wl);
    inv_freq = torch::where(medium, smoothed, llama);
  } else if (c.rope_scaling.type != "default") {
    check_supported(c);
  }
}

std::pair<torch::Tensor, torch::Tensor> Rotary::cos_sin(const torch::Tensor& positions) const {
  auto f = inv_freq.to(positions.device());
  auto freqs = positions.to(torch::kFloat32).unsqueeze(-1) * f;  // [B, T, D/2]
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos() * attention_scaling, emb.sin() * attention_scaling};
}

void KVCache::select_rows(const torch::Tensor& rows) {
  for (auto& t : k) t = t.index_select(0, rows);
  for (auto& t : v) t = t.index_select(0, rows);
}

PrefixKV PrefixKV::select_rows(const torch::Tensor& rows) const {
  PrefixKV out;
  for (const auto& t : k) out.k.push_back(t.index_select(0, rows));
  for (const auto& t : v) out.v.push_back(t.index_select(0, rows));
  return out;
}

PrefixKV PrefixKV::drop_columns(int64_t n) const {
  TORCH_CHECK(!k.empty() && n >= 0 && n < k.front().size(2), "drop_columns: n must be in [0, Lp)");
  if (n == 0) return *this;
  PrefixKV out;
  const int64_t Lp = k.front().size(2);
  for (const auto& t : k) out.k.push_back(t.narrow(2, n, Lp - n));
  for (const auto& t : v) out.v.push_back(t.narrow(2, n, Lp - n));
  if (tokens.defined()) out.tokens = tokens.narrow(1, n, Lp - n);
  if (hidden.defined()) {
    const int64_t cut = std::max<int64_t>(0, n - hidden_from);  // kept hidden columns that are dropped
    out.hidden = hidden.narrow(1, cut, hidden.size(1) - cut);
    out.hidden_from = std::max<int64_t>(0, hidden_from - n);
  }
  return out;
}

// ---- Attention / MLP / Layer ---------------------------------------------------------------

namespace {

// What one layer's attention reads and writes besides its input: the cache slots (kc/vc, keys
// written at `past`), or a prefix's keys/values [B, Hkv, Lp, D] to attend to before the new
// ones, and where to hand this call's keys/values (out_k/out_v) for a later call's prefix.
struct LayerKV {
  torch::Tensor* kc = nullptr;
  torch::Tensor* vc = nullptr;
  int64_t past = 0;
  torch::Tensor prefix_k, prefix_v;
  torch::Tensor* out_k = nullptr;
  torch::Tensor* out_v = nullptr;
  /// Queries (and the layer's output) only for columns [query_from, T): the keys and values
  /// still cover all T. For a last layer whose earlier outputs nobody reads.
  int64_t query_from = 0;
  /// A static-shape decode step (TransformerImpl::decode_step): the new key and value go to cache
  /// column *column (int64 [1] on the device) and attention reads the first `window` columns.
  const torch::Tensor* column = nullptr;
  int64_t window = 0;
};

class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const ModelConfig& c)
      : heads(c.num_attention_heads), kv_heads(c.num_key_value_heads), head_dim(c.head_dim) {
    q_proj = register_module("q_proj", Linear(c.hidden_size, heads * head_dim, c.qkv_bias));
    k_proj = register_module("k_proj", Linear(c.hidden_size, kv_heads * head_dim, c.qkv_bias));
    v_proj = register_module("v_proj", Linear(c.hidden_size, kv_heads * head_dim, c.qkv_bias));
    o_proj = register_module("o_proj", Linear(heads * head_dim, c.hidden_size, c.o_proj_bias));
    if (c.qk_norm) {
      q_norm = register_module("q_norm", RMSNorm(head_dim, c.rms_norm_eps));
      k_norm = register_module("k_norm", RMSNorm(head_dim, c.rms_norm_eps));
    }
  }

  // cos/sin [B, 1, T, D] in x's dtype; mask [B, 1, T, S] bool, additive (0 / -inf, fp32) or undefined (then causal if T>1).
  // `kv` carries the cache slots or a prefix's keys/values and where to put this call's keys.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, const LayerKV& kv) {
    const int64_t B = x.size(0), T = x.size(1);
    const int64_t from = kv.query_from, Tq = T - from;
    TORCH_CHECK(from >= 0 && from <= T && (from == 0 || kv.kc == nullptr), "query_from must be in [0, T], without a cache");
    auto [q, k, v] = project(x, cos, sin, from);
    if (kv.out_k != nullptr) {
      *kv.out_k = k;
      *kv.out_v = v;
    }
    if (Tq == 0) return x.narrow(1, T, 0);  // only the keys and values were wanted
    std::tie(k, v) = keys_values(k, v, kv, T);
    // Under autocast the projections and the rotary tables are in the compute dtype, but a q_norm
    // (Qwen3) or a cache may hold another: attention gets one dtype, the keys' (the cache's when
    // there is one).
    if (q.scalar_type() != k.scalar_type()) q = q.to(k.scalar_type());
    if (v.scalar_type() != k.scalar_type()) v = v.to(k.scalar_type());
    const int64_t past = kv.past;
    const bool causal = !mask.defined() && T > 1 && past == 0 && !kv.prefix_k.defined() && from == 0;
    TORCH_CHECK(mask.defined() || !kv.prefix_k.defined() || T == 1, "a prefix needs a key mask");
    auto mk = mask.defined() && from ? mask.narrow(2, from, Tq) : mask;
    if (!mask.defined() && T > 1 && (past > 0 || from > 0)) {
      auto qi = torch::arange(past + from, past + T, torch::TensorOptions().dtype(torch::kInt64).device(x.device()));
      auto kj = torch::arange(0, past + T, torch::TensorOptions().dtype(torch::kInt64).device(x.device()));
      mk = (kj.unsqueeze(0) <= qi.unsqueeze(1)).view({1, 1, Tq, past + T});
    }
    return o_proj(attend(q, k, v, mk, causal, kv.prefix_k.defined()).reshape({B, Tq, heads * head_dim}));
  }

  /// q [B, H, Tq, D] (columns [from, T) only), k and v [B, Hkv, T, D] of `x` [B, T, hidden]:
  /// the projections (fused or not), q/k norms, rotary.
  std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> project(const torch::Tensor& x, const torch::Tensor& cos,
                                                                  const torch::Tensor& sin, int64_t from) {
    const int64_t B = x.size(0), T = x.size(1), Tq = T - from;
    torch::Tensor q, k, v;
    if (qkv_weight.defined() && from == 0) {  // fused projections (fuse()): one GEMM
      auto qkv = at::linear(x, qkv_weight, qkv_bias).split_with_sizes(
          {heads * head_dim, kv_heads * head_dim, kv_heads * head_dim}, -1);
      q = qkv[0].view({B, T, heads, head_dim});
      k = qkv[1].view({B, T, kv_heads, head_dim});
      v = qkv[2].view({B, T, kv_heads, head_dim}).transpose(1, 2);
    } else {
      q = q_proj(from ? x.narrow(1, from, Tq) : x).view({B, Tq, heads, head_dim});
      k = k_proj(x).view({B, T, kv_heads, head_dim});
      v = v_proj(x).view({B, T, kv_heads, head_dim}).transpose(1, 2);
    }
    if (q_norm) {
      q = q_norm(q);
      k = k_norm(k);
    }
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    const auto rope = [B](const torch::Tensor& t, const torch::Tensor& c, const torch::Tensor& s) {
      if (cpu_fused_ok({&t, &c, &s}) && c.sizes() == s.sizes() && c.size(0) == B && c.size(2) == t.size(2))
        return rotary_cpu(t, c, s);
      return t * c + rotate_half(t) * s;
    };
    q = from ? rope(q, cos.narrow(2, from, Tq), sin.narrow(2, from, Tq)) : rope(q, cos, sin);
    k = rope(k, cos, sin);
    return {q, k, v};
  }

  /// The keys and values attention reads: a prefix's before this call's, or the cache's columns
  /// after writing this call's T columns into it (at kv.past, or at the device-side kv.column).
  std::pair<torch::Tensor, torch::Tensor> keys_values(torch::Tensor k, torch::Tensor v, const LayerKV& kv, int64_t T) {
    if (kv.prefix_k.defined()) {
      k = torch::cat({kv.prefix_k.to(k.scalar_type()), k}, 2);
      v = torch::cat({kv.prefix_v.to(v.scalar_type()), v}, 2);
    }
    torch::Tensor* kc = kv.kc;
    torch::Tensor* vc = kv.vc;
    if (kc != nullptr && kv.column != nullptr) {  // static shapes: the column is a device tensor
      kc->index_copy_(2, *kv.column, k.to(kc->scalar_type()));
      vc->index_copy_(2, *kv.column, v.to(vc->scalar_type()));
      return {kc->narrow(2, 0, kv.window), vc->narrow(2, 0, kv.window)};
    }
    if (kc != nullptr) {
      kc->narrow(2, kv.past, T).copy_(k);
      vc->narrow(2, kv.past, T).copy_(v);
      return {kc->narrow(2, 0, kv.past + T), vc->narrow(2, 0, kv.past + T)};
    }
    return {k, v};
  }

  /// softmax(q k^T / sqrt(D), mask) v: q [B, H, Tq, D], k and v [B, Hkv, S, D], mask `mk`
  /// (bool, additive or undefined; `causal` when undefined and causal). Returns [B, Tq, H, D]
  /// (contiguous or not), for the output projection.
  torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& mk,
                       bool causal, bool has_prefix) {
    const int64_t B = q.size(0), Tq = q.size(2);
    const auto opt_mask = mk.defined() ? std::optional<at::Tensor>(mk) : std::nullopt;
    // A decode step on the CPU (one new token per row, fp32, no gradient): one pass per row and
    // key/value head over the cache instead of SDPA's per-row, per-head matrix-vector calls.
    const bool grad = torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
    if (Tq == 1 && !grad && decode_attention_supported(q, k, v, mk)) return decode_attention_cpu(q, k, v, mk).transpose(1, 2);
    // A decode step elsewhere (GPU, bf16) with grouped-query heads: the G = H / Hkv query heads of
    // each key/value head become G query positions of that head, so SDPA reads the cache once
    // (enable_gqa with a mask falls back to the math kernel, which repeats K and V G times).
    if (Tq == 1 && !grad && heads != kv_heads && !has_prefix && (!mk.defined() || mk.dtype() == torch::kBool)) {
      const int64_t G = heads / kv_heads;
      return at::scaled_dot_product_attention(q.reshape({B, kv_heads, G, head_dim}), k, v, opt_mask, 0.0, false)
          .reshape({B, 1, heads, head_dim});  // head h = kv head h / G, query h % G
    }
    // On the CPU with an additive mask (a training or prefill forward), the queries run in
    // blocks of 256, each against the keys up to its last position only: the causal part of the
    // mask hides every later key from the whole block, and SDPA with a mask computes every key.
    constexpr int64_t kBlock = 256;
    const int64_t S = k.size(2);
    if (mk.defined() && mk.is_floating_point() && q.device().is_cpu() && Tq >= 2 * kBlock) {
      const int64_t first = S - Tq;  // key position of query row 0 (prefix, cache or query_from before it)
      std::vector<torch::Tensor> outs;
      for (int64_t a = 0; a < Tq; a += kBlock) {
        const int64_t n = std::min(kBlock, Tq - a), keys = first + a + n;
        outs.push_back(at::scaled_dot_product_attention(q.narrow(2, a, n), k.narrow(2, 0, keys), v.narrow(2, 0, keys),
                                                        mk.narrow(2, a, n).narrow(3, 0, keys), 0.0, false,
                                                        std::nullopt, heads != kv_heads));
      }
      return torch::cat(outs, 2).transpose(1, 2);
    }
    // Grouped-query heads with a mask off the CPU's float32 path (a padded prefill or a training
    // forward on a GPU, or in bf16): K and V repeated to the H query heads in their own (compute)
    // dtype, then SDPA without enable_gqa, which the memory-efficient kernel takes with a mask;
    // enable_gqa with a mask falls back to the math kernel (fp32 scores [B, H, T, S]).
    if (mk.defined() && heads != kv_heads && !(q.device().is_cpu() && q.scalar_type() == torch::kFloat)) {
      const int64_t G = heads / kv_heads;
      return at::scaled_dot_product_attention(q, k.repeat_interleave(G, 1), v.repeat_interleave(G, 1), opt_mask, 0.0,
                                              false)
          .transpose(1, 2);
    }
    return at::scaled_dot_product_attention(q, k, v, opt_mask, 0.0, causal, std::nullopt, heads != kv_heads)
        .transpose(1, 2);
  }

  /// Concatenates q/k/v into qkv_weight (and qkv_bias); the projections' weights become views of it.
  void fuse() {
    if (q_proj->has_lora() || k_proj->has_lora() || v_proj->has_lora())
      throw ModelError("fuse_projections: a q/k/v projection has a LoRA adapter (merge it first)");
    qkv_weight = fuse_rows({&q_proj->weight, &k_proj->weight, &v_proj->weight});
    if (q_proj->bias.defined()) qkv_bias = fuse_rows({&q_proj->bias, &k_proj->bias, &v_proj->bias});
  }

  int64_t heads, kv_heads, head_dim;
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
  torch::Tensor qkv_weight, qkv_bias;  ///< [q + 2 kv, hidden], [q + 2 kv] after fuse(); else undefined
};
TORCH_MODULE(Attention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const ModelConfig& c) {
    gate_proj = register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
    up_proj = register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
    down_proj = register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, c.mlp_bias));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (gate_up_weight.defined()) {  // fused projections (fuse()): one GEMM
      auto gu = at::linear(x, gate_up_weight, gate_up_bias).chunk(2, -1);
      return down_proj(torch::silu(gu[0]) * gu[1]);
    }
    return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
  }
  /// Concatenates gate/up into gate_up_weight (and bias); their weights become views of it.
  void fuse() {
    if (gate_proj->has_lora() || up_proj->has_lora())
      throw ModelError("fuse_projections: a gate/up projection has a LoRA adapter (merge it first)");
    gate_up_weight = fuse_rows({&gate_proj->weight, &up_proj->weight});
    if (gate_proj->bias.defined()) gate_up_bias = fuse_rows({&gate_proj->bias, &up_proj->bias});
  }
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  torch::Tensor gate_up_weight, gate_up_bias;  ///< [2 intermediate, hidden], [2 intermediate] after fuse()
};
TORCH_MODULE(Mlp);

}  // namespace

class DecoderLayerImpl : public torch::nn::Module {
 public:
  explicit DecoderLayerImpl(const ModelConfig& c) {
    self_attn = register_module("self_attn", Attention(c));
    mlp = register_module("mlp", Mlp(c));
    input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
    post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask, const LayerKV& kv) {
    auto a = self_attn(input_layernorm(x), cos, sin, mask, kv);
    auto h = (kv.query_from ? x.narrow(1, kv.query_from, x.size(1) - kv.query_from) : x) + a;
    if (h.size(1) == 0) return h;
    return h + mlp(post_attention_layernorm(h));
  }
  Attention self_attn{nullptr};
  Mlp mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};

// The Impl classes in the anonymous namespace are only used here.

// ---- Transformer ---------------------------------------------------------------------------

TransformerImpl::TransformerImpl(const ModelConfig& c) : rotary(c), config_(c) {
  check_supported(c);
  embed_tokens = register_module("embed_tokens", Embedding(c.vocab_size, c.hidden_size));
  auto list = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers.push_back(std::make_shared<DecoderLayerImpl>(c));
    list->push_back(layers.back());
  }
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  if (!c.tie_word_embeddings) lm_head = register_module("lm_head", Linear(c.hidden_size, c.vocab_size, false));
}


namespace {

/// The attention mask [B, 1, T, S] (S = past + T) from a key mask [B, S]: causal, keys the mask
/// allows, and each query's own position always. Bool, or additive fp32 (0 / -inf) for a
/// T > 1 fp32 forward on the CPU without autocast (SDPA would convert it in every layer).
torch::Tensor attention_mask(const torch::Tensor& key_mask, int64_t B, int64_t T, int64_t past, torch::ScalarType dt,
                             const torch::Device& dev) {
  const int64_t S = past + T;
  TORCH_CHECK(key_mask.size(0) == B && key_mask.size(1) == S, "key_mask must be [B, past + T]");
  auto qi = torch::arange(past, past + T, torch::TensorOptions().dtype(torch::kInt64).device(dev)).view({T, 1});
  auto kj = torch::arange(0, S, torch::TensorOptions().dtype(torch::kInt64).device(dev)).view({1, S});
  auto causal = (kj <= qi).view({1, 1, T, S});
  auto self = (kj == qi).view({1, 1, T, S});
  auto mask = causal.logical_and(key_mask.to(torch::kBool).view({B, 1, 1, S})).logical_or(self);
  if (T > 1 && dev.is_cpu() && dt == torch::kFloat32 && !at::autocast::is_autocast_enabled(at::kCPU))
    mask = torch::zeros({B, 1, T, S}, torch::TensorOptions().dtype(dt).device(dev))
               .masked_fill_(mask.logical_not(), -std::numeric_limits<float>::infinity());
  return mask;
}

/// The dtype the rotary tables are cast to: the autocast dtype under autocast (tables in the
/// weights' fp32 would promote q and k back to fp32, and the attention after them; issue
/// "GPU I", A3), else the weights' dtype `weights`.
torch::ScalarType rotary_dtype(torch::ScalarType weights, c10::DeviceType dev_type) {
  if (weights == torch::kFloat32 && (dev_type == at::kCPU || dev_type == at::kCUDA) &&
      at::autocast::is_autocast_enabled(dev_type))
    return at::autocast::get_autocast_dtype(dev_type);
  return weights;
}

/// One layer recomputed in backward (activation checkpointing): the prefix keys/values are inputs
/// of the recomputation (their gradients flow on to the prefix's forward), this call's
/// keys/values outputs (appended to `collect` when given). Returns the layer's output.
torch::Tensor checkpointed_layer(const std::shared_ptr<DecoderLayerImpl>& layer, const torch::Tensor& h,
                                 const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor& mask,
                                 const LayerKV& kv, bool has_prefix, PrefixKV* collect) {
  std::vector<torch::Tensor> params;
  for (auto& p : layer->parameters())
    if (p.requires_grad()) params.push_back(p);
  const bool collecting = collect != nullptr;
  const int64_t query_from = kv.query_from;
  auto fn = [layer, cos = cos, sin = sin, mask, has_prefix, collecting, query_from](const std::vector<torch::Tensor>& in) mutable {
    LayerKV lkv;
    lkv.past = has_prefix ? in[1].size(2) : 0;
    lkv.query_from = query_from;
    if (has_prefix) {
      lkv.prefix_k = in[1];
      lkv.prefix_v = in[2];
    }
    torch::Tensor ok, ov;
    if (collecting) {
      lkv.out_k = &ok;
      lkv.out_v = &ov;
    }
    auto out = layer->forward(in[0], cos, sin, mask, lkv);
    if (collecting) return std::vector<torch::Tensor>{out, ok, ov};
    return std::vector<torch::Tensor>{out};
  };
  std::vector<torch::Tensor> ins{h};
  if (has_prefix) {
    ins.push_back(kv.prefix_k);
    ins.push_back(kv.prefix_v);
  }
  auto outs = checkpoint(fn, ins, params);
  if (collect) {
    collect->k.push_back(outs[1]);
    collect->v.push_back(outs[2]);
  }
  return outs[0];
}

/// One layer run directly; its keys/values appended to `collect` when given.
torch::Tensor plain_layer(const std::shared_ptr<DecoderLayerImpl>& layer, const torch::Tensor& h,
                          const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor& mask, LayerKV kv,
                          PrefixKV* collect) {
  torch::Tensor ok, ov;
  if (collect) {
    kv.out_k = &ok;
    kv.out_v = &ov;
  }
  auto out = layer->forward(h, cos, sin, mask, kv);
  if (collect) {
    collect->k.push_back(ok);
    collect->v.push_back(ov);
  }
  return out;
}

}  // namespace

int64_t TransformerImpl::check_forward(const torch::Tensor& tokens, const KVCache* cache, const PrefixKV* prefix,
                                       const torch::Tensor& positions, const torch::Tensor& key_mask,
                                       int64_t keep_from) const {
  const int64_t T = tokens.size(1);
  if (cache && prefix) throw ModelError("forward: a KV cache and a shared prefix cannot be combined");
  if (keep_from < 0 || keep_from > T || (keep_from > 0 && cache))
    throw ModelError("forward: keep_from must be in [0, " + std::to_string(T) + "] and without a KV cache");
  if (prefix && prefix->k.size() != layers.size())
    throw ModelError("forward: the prefix has " + std::to_string(prefix->k.size()) + " layers, the model " +
                     std::to_string(layers.size()));
  const int64_t past = cache ? cache->length : (prefix && !layers.empty() ? prefix->k[0].size(2) : 0);
  if (cache && past + T > cache->max_len)
    throw ModelError("KV cache holds " + std::to_string(cache->max_len) + " positions; " +
                     std::to_string(past + T) + " needed");
  if (prefix && (!positions.defined() || !key_mask.defined()))
    throw ModelError("forward: a shared prefix needs positions and a key mask");
  return past;
}

torch::Tensor TransformerImpl::forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                                       const torch::Tensor& key_mask, KVCache* cache, const PrefixKV* prefix,
                                       PrefixKV* collect, int64_t keep_from) {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  const int64_t past = check_forward(tokens, cache, prefix, positions, key_mask, keep_from);
  // Rotary tables for the positions (default: past .. past + T - 1), angles in fp32.
  auto pos = positions;
  if (!pos.defined())
    pos = torch::arange(past, past + T, tokens.options().dtype(torch::kInt64)).unsqueeze(0).expand({B, T});
  auto [cos, sin] = rotary.cos_sin(pos);
  const torch::ScalarType dt = rotary_dtype(dtype(), tokens.device().type());
  cos = cos.to(dt).unsqueeze(1);
  sin = sin.to(dt).unsqueeze(1);
  const torch::Tensor mask =
      key_mask.defined() ? attention_mask(key_mask, B, T, past, dt, tokens.device()) : torch::Tensor();
  // The layers.
  auto h = embed_tokens(tokens);
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerKV kv;
    kv.kc = cache ? &cache->k[i] : nullptr;
    kv.vc = cache ? &cache->v[i] : nullptr;
    kv.past = past;
    // The last layer's outputs before keep_from are read by nobody: only its keys and values.
    kv.query_from = i + 1 == layers.size() ? keep_from : 0;
    if (prefix) {
      kv.prefix_k = prefix->k[i];
      kv.prefix_v = prefix->v[i];
    }
    if (checkpointing_ && cache == nullptr && torch::GradMode::is_enabled())
      h = checkpointed_layer(layers[i], h, cos, sin, mask, kv, prefix != nullptr, collect);
    else
      h = plain_layer(layers[i], h, cos, sin, mask, kv, collect);
  }
  if (cache) cache->length = past + T;
  if (layers.empty() && keep_from > 0) h = h.narrow(1, keep_from, T - keep_from);
  if (h.size(1) == 0) return h;
  return norm(h);
}

torch::Tensor TransformerImpl::logits(const torch::Tensor& hidden) {
  if (lm_head) return lm_head(hidden);
  return at::linear(hidden, embed_tokens->weight);
}

torch::Tensor TransformerImpl::forward_logits(const torch::Tensor& tokens, const torch::Tensor& positions,
                                              const torch::Tensor& key_mask, KVCache* cache) {
  return logits(forward(tokens, positions, key_mask, cache)).to(torch::kFloat32);
}

torch::Tensor TransformerImpl::decode_step(const torch::Tensor& tokens, const torch::Tensor& positions,
                                           const torch::Tensor& key_mask, KVCache& cache, const torch::Tensor& column,
                                           int64_t window) {
  const int64_t B = tokens.size(0);
  if (tokens.dim() != 2 || tokens.size(1) != 1 || positions.sizes() != tokens.sizes())
    throw ModelError("decode_step: tokens and positions must be [B, 1]");
  if (window < 1 || window > cache.max_len || key_mask.dim() != 2 || key_mask.size(0) != B ||
      key_mask.size(1) < window || column.numel() != 1)
    throw ModelError("decode_step: window " + std::to_string(window) + " must fit the cache (" +
                     std::to_string(cache.max_len) + ") and the key mask [B, >= window]; column must be one index");
  auto [cos, sin] = rotary.cos_sin(positions);
  const torch::ScalarType dt = rotary_dtype(dtype(), tokens.device().type());
  cos = cos.to(dt).unsqueeze(1);
  sin = sin.to(dt).unsqueeze(1);
  const torch::Tensor mask = key_mask.narrow(1, 0, window).to(torch::kBool).view({B, 1, 1, window});
  auto h = embed_tokens(tokens);
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerKV kv;
    kv.kc = &cache.k[i];
    kv.vc = &cache.v[i];
    kv.column = &column;
    kv.window = window;
    h = layers[i]->forward(h, cos, sin, mask, kv);
  }
  return norm(h);
}

void TransformerImpl::fuse_projections() {
  if (fused_) return;
  for (auto& layer : layers) {
    layer->self_attn->fuse();
    layer->mlp->fuse();
  }
  fused_ = true;
}

KVCache TransformerImpl::make_cache(int64_t batch, int64_t max_len, c10::ScalarType dtype) const {
  KVCache c;
  c.max_len = max_len;
  auto opts = embed_tokens->weight.options().requires_grad(false);
  if (dtype != c10::ScalarType::Undefined) opts = opts.dtype(dtype);
  for (size_t i = 0; i < layers.size(); ++i) {
    c.k.push_back(torch::empty({batch, config_.num_key_value_heads, max_len, config_.head_dim}, opts));
    c.v.push_back(torch::empty({batch, config_.num_key_value_heads, max_len, config_.head_dim}, opts));
  }
  return c;
}


}  // namespace leap::model
