#include "model/weight_shapes.hpp"

#include "util/error.hpp"

namespace leap::model {

namespace {

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

/// A Linear's weight [out, in] and, with a bias, its bias [out].
void add_linear(std::map<std::string, std::vector<int64_t>>& out, const std::string& name, int64_t in, int64_t o,
                bool bias) {
  out[name + ".weight"] = {o, in};
  if (bias) out[name + ".bias"] = {o};
}

}  // namespace

std::map<std::string, std::vector<int64_t>> hf_weight_shapes(const ModelConfig& c) {
  std::map<std::string, std::vector<int64_t>> out;
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  out["model.embed_tokens.weight"] = {c.vocab_size, h};
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    add_linear(out, l + "self_attn.q_proj", h, q, c.qkv_bias);
    add_linear(out, l + "self_attn.k_proj", h, kv, c.qkv_bias);
    add_linear(out, l + "self_attn.v_proj", h, kv, c.qkv_bias);
    add_linear(out, l + "self_attn.o_proj", q, h, c.o_proj_bias);
    if (c.qk_norm) {
      out[l + "self_attn.q_norm.weight"] = {c.head_dim};
      out[l + "self_attn.k_norm.weight"] = {c.head_dim};
    }
    add_linear(out, l + "mlp.gate_proj", h, c.intermediate_size, c.mlp_bias);
    add_linear(out, l + "mlp.up_proj", h, c.intermediate_size, c.mlp_bias);
    add_linear(out, l + "mlp.down_proj", c.intermediate_size, h, c.mlp_bias);
    out[l + "input_layernorm.weight"] = {h};
    out[l + "post_attention_layernorm.weight"] = {h};
  }
  out["model.norm.weight"] = {h};
  if (!c.tie_word_embeddings) out["lm_head.weight"] = {c.vocab_size, h};
  return out;
}

void check_weights(const SafetensorsCheckpoint& ckpt, const ModelConfig& c) {
  const auto want = hf_weight_shapes(c);
  const std::string src = ckpt.source().string();
  for (const auto& name : ckpt.names()) {
    if (want.count(name)) continue;
    if (name == "lm_head.weight" && c.tie_word_embeddings) continue;
    if (name.ends_with(".rotary_emb.inv_freq")) continue;
    throw ModelError(src + ": unexpected tensor '" + name + "' for model_type " + c.model_type_name +
                     " (the config does not use it)");
  }
  for (const auto& [name, shape] : want) {
    const TensorView* v = ckpt.find(name);
    if (v == nullptr) throw ModelError(src + ": missing tensor '" + name + "'");
    if (v->shape != shape)
      throw ModelError(src + ": tensor '" + name + "' has shape " + shape_text(v->shape) + ", the config needs " +
                       shape_text(shape));
  }
}

}  // namespace leap::model
