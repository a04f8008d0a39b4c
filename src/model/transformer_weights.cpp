// TransformerImpl's weights from and to a Hugging Face folder: the state dict under HF names,
// loading a safetensors checkpoint, load_transformer (model/transformer.hpp).
#include "model/safetensors_torch.hpp"
#include "model/transformer.hpp"
#include "model/transformer_internal.hpp"
#include "model/weight_shapes.hpp"
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
  check_weights(ckpt, config_);  // names and shapes, with the messages `leap model inspect` gives
  auto params = hf_state_dict();
  torch::NoGradGuard ng;
  for (auto& [name, p] : params) {
    const TensorView* v = ckpt.find(name);
    if (v == nullptr || at::IntArrayRef(v->shape) != p.sizes())  // hf_weight_shapes disagrees with the module
      throw ModelError(ckpt.source().string() + ": tensor '" + name + "' does not fit parameter " + shape_str(p.sizes()));
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
