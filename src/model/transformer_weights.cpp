// TransformerImpl's weights from and to a Hugging Face folder: the state dict under HF names,
// loading a safetensors checkpoint, load_transformer (model/transformer.hpp).
#include "model/safetensors_torch.hpp"
#include "model/transformer.hpp"
#include "model/transformer_internal.hpp"
#include "util/error.hpp"

namespace leap::model {

using detail::is_lora_name;
using detail::shape_str;

namespace {
/// The Hugging Face name of parameter `n` ("model." + n, lm_head as it is).
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

}  // namespace leap::model
