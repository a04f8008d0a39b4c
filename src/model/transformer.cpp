#include "model/transformer.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include <ATen/autocast_mode.h>
#include <nlohmann/json.hpp>

#include "model/autocast.hpp"
#include "model/cpu_fused.hpp"
#include "model/decode_attention.hpp"
#include "model/safetensors_torch.hpp"
#include "model/safetensors_writer.hpp"
#include "util/error.hpp"

namespace leap::model {

namespace {

torch::Tensor rotate_half(const torch::Tensor& x) {
  const int64_t h = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, h, h), x.narrow(-1, 0, h)}, -1);
}

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
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
    torch::Tensor* kc = kv.kc;
    torch::Tensor* vc = kv.vc;
    const int64_t past = kv.past;
    const int64_t B = x.size(0), T = x.size(1);
    const int64_t from = kv.query_from, Tq = T - from;
    TORCH_CHECK(from >= 0 && from <= T && (from == 0 || kv.kc == nullptr), "query_from must be in [0, T], without a cache");
    auto q = q_proj(from ? x.narrow(1, from, Tq) : x).view({B, Tq, heads, head_dim});
    auto k = k_proj(x).view({B, T, kv_heads, head_dim});
    auto v = v_proj(x).view({B, T, kv_heads, head_dim}).transpose(1, 2);
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
    if (kv.out_k != nullptr) {
      *kv.out_k = k;
      *kv.out_v = v;
    }
    if (Tq == 0) return x.narrow(1, T, 0);  // only the keys and values were wanted
    if (kv.prefix_k.defined()) {
      k = torch::cat({kv.prefix_k.to(k.scalar_type()), k}, 2);
      v = torch::cat({kv.prefix_v.to(v.scalar_type()), v}, 2);
    }
    if (kc != nullptr) {
      kc->narrow(2, past, T).copy_(k);
      vc->narrow(2, past, T).copy_(v);
      k = kc->narrow(2, 0, past + T);
      v = vc->narrow(2, 0, past + T);
    }
    // Under autocast the projections and the rotary tables are in the compute dtype, but a q_norm
    // (Qwen3) or a cache may hold another: attention gets one dtype, the keys' (the cache's when
    // there is one).
    if (q.scalar_type() != k.scalar_type()) q = q.to(k.scalar_type());
    if (v.scalar_type() != k.scalar_type()) v = v.to(k.scalar_type());
    const bool causal = !mask.defined() && T > 1 && past == 0 && !kv.prefix_k.defined() && from == 0;
    TORCH_CHECK(mask.defined() || !kv.prefix_k.defined() || T == 1, "a prefix needs a key mask");
    auto mk = mask.defined() && from ? mask.narrow(2, from, Tq) : mask;
    if (!mask.defined() && T > 1 && (past > 0 || from > 0)) {
      auto qi = torch::arange(past + from, past + T, torch::TensorOptions().dtype(torch::kInt64).device(x.device()));
      auto kj = torch::arange(0, past + T, torch::TensorOptions().dtype(torch::kInt64).device(x.device()));
      mk = (kj.unsqueeze(0) <= qi.unsqueeze(1)).view({1, 1, Tq, past + T});
    }
    // A decode step on the CPU (one new token per row, fp32, no gradient): one pass per row and
    // key/value head over the cache instead of SDPA's per-row, per-head matrix-vector calls.
    const bool grad = torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
    if (T == 1 && !grad && decode_attention_supported(q, k, v, mk))
      return o_proj(decode_attention_cpu(q, k, v, mk).view({B, T, heads * head_dim}));
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
      return o_proj(torch::cat(outs, 2).transpose(1, 2).reshape({B, Tq, heads * head_dim}));
    }
    auto out = at::scaled_dot_product_attention(q, k, v, mk.defined() ? std::optional<at::Tensor>(mk) : std::nullopt,
                                                0.0, causal, std::nullopt, heads != kv_heads);
    return o_proj(out.transpose(1, 2).reshape({B, Tq, heads * head_dim}));
  }

  int64_t heads, kv_heads, head_dim;
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
};
TORCH_MODULE(Attention);

class MlpImpl : public torch::nn::Module {
 public:
  explicit MlpImpl(const ModelConfig& c) {
    gate_proj = register_module("gate_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
    up_proj = register_module("up_proj", Linear(c.hidden_size, c.intermediate_size, c.mlp_bias));
    down_proj = register_module("down_proj", Linear(c.intermediate_size, c.hidden_size, c.mlp_bias));
  }
  torch::Tensor forward(const torch::Tensor& x) { return down_proj(torch::silu(gate_proj(x)) * up_proj(x)); }
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
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

// ---- Checkpoint ----------------------------------------------------------------------------

namespace {

using CkptFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// The autocast state (model/autocast.hpp) is captured at the forward and put back around the
// recomputation in backward (as torch.utils.checkpoint does), so checkpointed layers are
// recomputed in the forward's precision: the gradients are those of the function that gave the
// forward's outputs.
struct FnHolder : torch::CustomClassHolder {
  CkptFn fn;
  int64_t n_inputs = 0;
  AutocastState autocast;  // of the forward, for the recomputation
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                c10::intrusive_ptr<FnHolder> holder, at::TensorList all) {
    std::vector<torch::Tensor> ins(all.begin(), all.begin() + holder->n_inputs);
    ctx->save_for_backward(std::vector<torch::Tensor>(all.begin(), all.end()));
    ctx->saved_data["fn"] = c10::IValue::make_capsule(holder);
    auto outs = holder->fn(ins);
    return outs;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto holder = c10::static_intrusive_pointer_cast<FnHolder>(ctx->saved_data["fn"].toCapsule());
    auto saved = ctx->get_saved_variables();
    const int64_t n = holder->n_inputs;
    std::vector<torch::Tensor> ins;
    std::vector<torch::Tensor> targets;
    std::vector<int64_t> target_idx;
    for (int64_t i = 0; i < static_cast<int64_t>(saved.size()); ++i) {
      auto t = saved[i];
      if (i < n) {
        auto d = t.detach().requires_grad_(t.requires_grad());
        ins.push_back(d);
        if (t.requires_grad()) { targets.push_back(d); target_idx.push_back(i); }
      } else if (t.requires_grad()) {
        targets.push_back(t);
        target_idx.push_back(i);
      }
    }
    std::vector<torch::Tensor> outs, gouts;
    {
      torch::AutoGradMode on(true);
      AutocastScope autocast(holder->autocast);  // recompute in the forward's precision
      auto res = holder->fn(ins);
      for (size_t i = 0; i < res.size(); ++i)
        if (res[i].requires_grad() && i < grads.size() && grads[i].defined()) {
          outs.push_back(res[i]);
          gouts.push_back(grads[i]);
        }
    }
    torch::autograd::variable_list result(1 + saved.size());
    if (!outs.empty() && !targets.empty()) {
      auto g = torch::autograd::grad(outs, targets, gouts, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
      for (size_t j = 0; j < g.size(); ++j) result[1 + target_idx[j]] = g[j];
    }
    return result;
  }
};

}  // namespace

std::vector<torch::Tensor> checkpoint(CkptFn fn, const std::vector<torch::Tensor>& inputs,
                                      const std::vector<torch::Tensor>& params) {
  bool any = torch::GradMode::is_enabled();
  bool needs = false;
  for (auto& t : inputs) needs = needs || t.requires_grad();
  for (auto& t : params) needs = needs || t.requires_grad();
  if (!any || !needs) return fn(inputs);
  auto holder = c10::make_intrusive<FnHolder>();
  holder->fn = std::move(fn);
  holder->n_inputs = static_cast<int64_t>(inputs.size());
  holder->autocast = AutocastState::capture();
  std::vector<torch::Tensor> all(inputs);
  for (auto& p : params)
    if (p.requires_grad()) all.push_back(p);
  return CheckpointFunction::apply(holder, at::TensorList(all));
}

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

namespace {
bool is_lora_name(const std::string& n) {
  return n.size() >= 6 && (n.ends_with("lora_a") || n.ends_with("lora_b"));
}
std::string hf_name(const std::string& n) { return n.starts_with("lm_head") ? n : "model." + n; }
}  // namespace

std::map<std::string, torch::Tensor> TransformerImpl::hf_state_dict() const {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : named_parameters(true))
    if (!is_lora_name(item.key())) out[hf_name(item.key())] = item.value();
  return out;
}

void TransformerImpl::load(const SafetensorsCheckpoint& ckpt) {
  auto params = hf_state_dict();
  const std::string src = ckpt.source().string();
  for (const auto& name : ckpt.names()) {
    if (params.count(name)) continue;
    if (name == "lm_head.weight" && config_.tie_word_embeddings) continue;
    if (name.ends_with(".rotary_emb.inv_freq")) continue;
    throw ModelError(src + ": unexpected tensor '" + name + "' for model_type " + config_.model_type_name +
                     " (the config does not use it)");
  }
  torch::NoGradGuard ng;
  for (auto& [name, p] : params) {
    const TensorView* v = ckpt.find(name);
    if (v == nullptr) throw ModelError(src + ": missing tensor '" + name + "'");
    if (at::IntArrayRef(v->shape) != p.sizes())
      throw ModelError(src + ": tensor '" + name + "' has shape " + shape_str(v->shape) + ", the config needs " +
                       shape_str(p.sizes()));
    p.copy_(to_torch(*v, /*copy=*/false));
  }
}

int64_t TransformerImpl::num_parameters() const {
  int64_t n = 0;
  for (auto& [name, p] : hf_state_dict()) n += p.numel();
  return n;
}

void TransformerImpl::add_lora(const LoraOptions& opts) {
  const std::set<std::string> targets(opts.targets.begin(), opts.targets.end());
  for (auto& p : parameters()) p.requires_grad_(false);
  for (const auto& item : named_modules()) {
    const std::string& key = item.key();
    const auto dot = key.rfind('.');
    const std::string leaf = dot == std::string::npos ? key : key.substr(dot + 1);
    if (!targets.count(leaf)) continue;
    if (auto* lin = item.value()->as<LinearImpl>()) lin->add_lora(opts.rank, opts.alpha);
  }
}

std::map<std::string, torch::Tensor> TransformerImpl::lora_state_dict() const {
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : named_parameters(true)) {
    const std::string& k = item.key();
    if (!is_lora_name(k)) continue;
    const std::string base = k.substr(0, k.size() - std::string("lora_a").size());
    const std::string which = k.ends_with("lora_a") ? "lora_A" : "lora_B";
    out["base_model.model.model." + base + which + ".weight"] = item.value();
  }
  return out;
}

void TransformerImpl::save_lora(const std::filesystem::path& dir) const {
  std::filesystem::create_directories(dir);
  std::map<std::string, torch::Tensor> cpu;
  int64_t rank = 0;
  double scale = 0;
  std::set<std::string> targets;
  for (const auto& item : named_modules()) {
    if (auto* lin = item.value()->as<LinearImpl>(); lin && lin->has_lora()) {
      rank = lin->lora_a.size(0);
      scale = lin->lora_scale;
      const auto& key = item.key();
      targets.insert(key.substr(key.rfind('.') + 1));
    }
  }
  for (auto& [k, v] : lora_state_dict()) cpu[k] = v.detach().to(torch::kCPU).contiguous();
  write_safetensors(dir / "adapter_model.safetensors", tensor_bytes(cpu));
  nlohmann::json j = {{"peft_type", "LORA"}, {"r", rank}, {"lora_alpha", scale * static_cast<double>(rank)},
                      {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
                      {"bias", "none"}, {"task_type", "CAUSAL_LM"}};
  std::ofstream(dir / "adapter_config.json") << j.dump(2) << "\n";
}

void TransformerImpl::load_lora(const std::filesystem::path& dir) {
  auto ckpt = SafetensorsCheckpoint::open(dir / "adapter_model.safetensors");
  auto mine = lora_state_dict();
  torch::NoGradGuard ng;
  for (const auto& name : ckpt.names())
    if (!mine.count(name)) throw ModelError(dir.string() + ": unexpected LoRA tensor '" + name + "'");
  for (auto& [name, p] : mine) {
    const TensorView* v = ckpt.find(name);
    if (!v) throw ModelError(dir.string() + ": missing LoRA tensor '" + name + "'");
    if (at::IntArrayRef(v->shape) != p.sizes())
      throw ModelError(dir.string() + ": LoRA tensor '" + name + "' has shape " + shape_str(v->shape) +
                       ", the model needs " + shape_str(p.sizes()));
    p.copy_(to_torch(*v, false));
  }
}

Transformer load_transformer(const std::filesystem::path& dir, torch::ScalarType dtype, torch::Device device) {
  const ModelConfig c = load_model_config(dir);
  auto ckpt = SafetensorsCheckpoint::open(dir);
  Transformer m(c);
  m->load(ckpt);
  m->to(device, dtype);
  m->rotary.inv_freq = m->rotary.inv_freq.to(device);  // stays fp32
  m->eval();
  return m;
}

torch::Tensor positions_from_mask(const torch::Tensor& attention_mask) {
  auto m = attention_mask.to(torch::kInt64);
  auto pos = m.cumsum(-1) - 1;
  return pos.masked_fill(m == 0, 1);
}

namespace {

// Log-probs and entropies of the last C tokens of `tokens` [B, T] from the hidden states [B, T, H]
// of the same rows: the LM head + log_softmax over `chunk` positions at a time, each chunk
// recomputed in backward.
//
// With `spans`, output row k scores the spans->len tokens of row spans->row[k] from column
// spans->start[k] on instead (columns past the row's end are clamped to its last column; the
// caller masks them out). The hidden states are gathered by index_select, whose backward adds,
// so rows scored by several outputs get the sum of their gradients.
TokenLogProbs head_logprobs(Transformer& model, const torch::Tensor& hidden, const torch::Tensor& tokens,
                            int64_t C, double temperature, int64_t chunk, const ScoreSpans* spans = nullptr,
                            int64_t offset = 0) {
  // hidden [B, S - offset, H] holds the columns from `offset` on.
  const int64_t S = tokens.size(1);
  torch::Tensor h, targets;
  if (spans == nullptr) {
    h = hidden.narrow(1, S - C - 1 - offset, C);
    targets = tokens.narrow(1, S - C, C);
  } else {
    C = spans->len;
    const int64_t M = spans->row.size(0), B = tokens.size(0), H = hidden.size(2), Sh = hidden.size(1);
    const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(tokens.device());
    auto cols = (spans->start.to(opts).unsqueeze(1) + torch::arange(C, opts).unsqueeze(0)).clamp(1, S - 1);  // [M, C]
    auto row = spans->row.to(opts).unsqueeze(1);
    h = hidden.reshape({B * Sh, H}).index_select(0, (row * Sh + cols - 1 - offset).reshape({-1})).view({M, C, H});
    targets = tokens.reshape({-1}).index_select(0, (row * S + cols).reshape({-1})).view({M, C});
  }
  std::vector<torch::Tensor> params;
  auto w = model->lm_head ? model->lm_head->weight : model->embed_tokens->weight;
  if (w.requires_grad()) params.push_back(w);
  if (model->lm_head && model->lm_head->has_lora()) {
    params.push_back(model->lm_head->lora_a);
    params.push_back(model->lm_head->lora_b);
  }
  std::vector<torch::Tensor> lps, ents;
  for (int64_t s = 0; s < C; s += chunk) {
    const int64_t n = std::min(chunk, C - s);
    auto tg = targets.narrow(1, s, n);
    auto fn = [model, tg, temperature](const std::vector<torch::Tensor>& in) mutable {
      auto logits = model->logits(in[0]).to(torch::kFloat32);
      if (temperature != 1.0) logits = logits / temperature;
      auto lsm = torch::log_softmax(logits, -1);
      auto lp = lsm.gather(-1, tg.unsqueeze(-1)).squeeze(-1);
      auto ent = -(lsm.exp() * lsm).sum(-1);
      return std::vector<torch::Tensor>{lp, ent};
    };
    auto out = checkpoint(fn, {h.narrow(1, s, n)}, params);
    lps.push_back(out[0]);
    ents.push_back(out[1]);
  }
  return {torch::cat(lps, 1), torch::cat(ents, 1)};
}

}  // namespace

namespace {

/// The first column whose hidden state a span reads (start - 1; 0 without spans).
int64_t first_read_column(const ScoreSpans& spans) {
  return spans.start.numel() == 0 ? 0 : std::max<int64_t>(0, spans.start.min().item<int64_t>() - 1);
}

/// Spans over `rows` rows of `width` columns.
void check_spans(const ScoreSpans& spans, int64_t rows, int64_t width) {
  TORCH_CHECK(spans.row.dim() == 1 && spans.start.sizes() == spans.row.sizes(), "spans.row and spans.start must be [M]");
  TORCH_CHECK(spans.len >= 1, "spans.len must be >= 1");
  if (spans.row.numel() == 0) return;
  const auto r = spans.row.cpu(), st = spans.start.cpu();
  TORCH_CHECK(r.min().item<int64_t>() >= 0 && r.max().item<int64_t>() < rows, "spans.row out of range");
  TORCH_CHECK(st.min().item<int64_t>() >= 1 && st.max().item<int64_t>() < width,
              "spans.start must be in [1, seq_len)");
}

TokenLogProbs forward_logprobs(Transformer& model, const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                               int64_t C, double temperature, int64_t chunk, const ScoreSpans* spans) {
  torch::Tensor pos, mask;
  if (attention_mask.defined()) {
    pos = positions_from_mask(attention_mask);
    mask = attention_mask.to(torch::kBool);
  }
  // Only the columns that predict a scored token need the last layer's outputs.
  const int64_t from = spans == nullptr ? tokens.size(1) - C - 1 : first_read_column(*spans);
  auto hidden = model->forward(tokens, pos, mask, nullptr, nullptr, nullptr, from);
  return head_logprobs(model, hidden, tokens, C, temperature, chunk, spans, from);
}

}  // namespace

TokenLogProbs completion_logprobs(Transformer& model, const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                  int64_t completion_len, double temperature, int64_t chunk) {
  const int64_t S = tokens.size(1), C = completion_len;
  TORCH_CHECK(C >= 1 && C < S, "completion_len must be in [1, seq_len)");
  return forward_logprobs(model, tokens, attention_mask, C, temperature, chunk, nullptr);
}

TokenLogProbs completion_logprobs(Transformer& model, const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                  const ScoreSpans& spans, double temperature, int64_t chunk) {
  check_spans(spans, tokens.size(0), tokens.size(1));
  return forward_logprobs(model, tokens, attention_mask, spans.len, temperature, chunk, &spans);
}

PrefixKV prefix_keys_values(Transformer& model, const torch::Tensor& prefix_tokens, const torch::Tensor& prefix_mask,
                            int64_t hidden_from) {
  TORCH_CHECK(prefix_tokens.dim() == 2 && prefix_mask.sizes() == prefix_tokens.sizes(),
              "prefix_tokens and prefix_mask must be [U, Lp]");
  const int64_t Lp = prefix_tokens.size(1);
  TORCH_CHECK(hidden_from >= 0, "hidden_from must be >= 0");
  PrefixKV kv;
  kv.hidden_from = std::min(hidden_from, Lp);
  kv.hidden = model->forward(prefix_tokens, positions_from_mask(prefix_mask), prefix_mask.to(torch::kBool), nullptr,
                             nullptr, &kv, kv.hidden_from);
  kv.tokens = prefix_tokens;
  return kv;
}

namespace {

TokenLogProbs continue_forward(Transformer& model, const PrefixKV& prefix, const torch::Tensor& prefix_mask,
                               const torch::Tensor& prefix_row, const torch::Tensor& tokens,
                               const torch::Tensor& attention_mask, int64_t C, double temperature, int64_t chunk,
                               const ScoreSpans* spans) {
  TORCH_CHECK(prefix_row.dim() == 1 && prefix_row.size(0) == tokens.size(0), "prefix_row must be [B]");
  TORCH_CHECK(attention_mask.sizes() == tokens.sizes(), "attention_mask must be [B, T]");
  const PrefixKV rows = prefix.select_rows(prefix_row);
  // Row b's positions continue its prefix's real tokens.
  auto plen = prefix_mask.to(torch::kInt64).sum(1).index_select(0, prefix_row);  // [B]
  auto tm = attention_mask.to(torch::kInt64);
  auto pos = (tm.cumsum(-1) - 1 + plen.unsqueeze(1)).masked_fill(tm == 0, 1);
  auto key_mask = torch::cat({prefix_mask.to(torch::kBool).index_select(0, prefix_row), attention_mask.to(torch::kBool)}, 1);
  if (spans == nullptr) {
    const int64_t from = tokens.size(1) - C - 1;
    auto hidden = model->forward(tokens, pos, key_mask, nullptr, &rows, nullptr, from);
    return head_logprobs(model, hidden, tokens, C, temperature, chunk, nullptr, from);
  }
  // Spans count columns of [prefix | tokens]. When none reads a prefix column (the first scored
  // token's predictor is column start - 1), the rows alone are enough.
  const int64_t Lp = prefix_mask.size(1), first = first_read_column(*spans);
  if (first >= Lp) {
    ScoreSpans tail{spans->row, spans->start - Lp, spans->len};
    auto hidden = model->forward(tokens, pos, key_mask, nullptr, &rows, nullptr, first - Lp);
    return head_logprobs(model, hidden, tokens, C, temperature, chunk, &tail, first - Lp);
  }
  TORCH_CHECK(prefix.hidden.defined() && prefix.tokens.defined() && prefix.hidden_from <= first &&
                  prefix.hidden.size(1) == Lp - prefix.hidden_from,
              "a span in the prefix needs the prefix's hidden states from its column on (prefix_keys_values)");
  auto hidden = model->forward(tokens, pos, key_mask, nullptr, &rows);
  auto full_hidden = torch::cat({prefix.hidden.index_select(0, prefix_row).to(hidden.scalar_type()), hidden}, 1);
  auto full_tokens = torch::cat({prefix.tokens.index_select(0, prefix_row), tokens}, 1);
  return head_logprobs(model, full_hidden, full_tokens, C, temperature, chunk, spans, prefix.hidden_from);
}

}  // namespace

TokenLogProbs continue_logprobs(Transformer& model, const PrefixKV& prefix, const torch::Tensor& prefix_mask,
                                const torch::Tensor& prefix_row, const torch::Tensor& tokens,
                                const torch::Tensor& attention_mask, int64_t completion_len, double temperature,
                                int64_t chunk) {
  const int64_t T = tokens.size(1), C = completion_len;
  TORCH_CHECK(C >= 1 && C < T, "completion_len must be in [1, tail_len)");
  return continue_forward(model, prefix, prefix_mask, prefix_row, tokens, attention_mask, C, temperature, chunk,
                          nullptr);
}

TokenLogProbs continue_logprobs(Transformer& model, const PrefixKV& prefix, const torch::Tensor& prefix_mask,
                                const torch::Tensor& prefix_row, const torch::Tensor& tokens,
                                const torch::Tensor& attention_mask, const ScoreSpans& spans, double temperature,
                                int64_t chunk) {
  TORCH_CHECK(prefix_mask.dim() == 2, "prefix_mask must be [U, Lp]");
  check_spans(spans, tokens.size(0), prefix_mask.size(1) + tokens.size(1));
  return continue_forward(model, prefix, prefix_mask, prefix_row, tokens, attention_mask, spans.len, temperature,
                          chunk, &spans);
}

TokenLogProbs completion_logprobs_shared(Transformer& model, const torch::Tensor& prefix_tokens,
                                         const torch::Tensor& prefix_mask, const torch::Tensor& prefix_row,
                                         const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                         int64_t completion_len, double temperature, int64_t chunk) {
  const PrefixKV kv = prefix_keys_values(model, prefix_tokens, prefix_mask);
  return continue_logprobs(model, kv, prefix_mask, prefix_row, tokens, attention_mask, completion_len, temperature,
                           chunk);
}

}  // namespace leap::model
