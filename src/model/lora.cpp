// LoRA adapters on the decoder's linear layers (model/transformer.hpp LoraOptions): adding them,
// and saving / loading them as a PEFT adapter folder (adapter_model.safetensors, adapter_config.json).
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "model/safetensors_torch.hpp"
#include "model/safetensors_writer.hpp"
#include "model/transformer.hpp"
#include "model/transformer_internal.hpp"
#include "util/error.hpp"

namespace leap::model {

using detail::is_lora_name;
using detail::shape_str;

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

}  // namespace leap::model
