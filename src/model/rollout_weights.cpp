#include "model/rollout_weights.hpp"

#include <set>
#include <string>

#include "util/error.hpp"

namespace leap::model {

RolloutWeights::RolloutWeights(Transformer& policy, torch::ScalarType dtype) : policy_(policy), dtype_(dtype) {
  copy_ = Transformer(policy->config());
  copy_->to(policy->device(), dtype);
  copy_->rotary = policy->rotary;  // inv_freq stays fp32 on the policy's device
  copy_->eval();
  for (auto& p : copy_->parameters()) p.set_requires_grad(false);
  copy_->fuse_projections();
  refresh();
}

void RolloutWeights::refresh() {
  torch::NoGradGuard no_grad;
  auto dst = copy_->named_parameters(/*recurse=*/true);
  // 1. Projections with a LoRA adapter: W + s * B A, in float32.
  std::set<std::string> merged;
  for (const auto& item : policy_->named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    const auto* lin = item.value()->as<LinearImpl>();
    if (lin == nullptr || !lin->has_lora()) continue;
    const std::string name = item.key() + ".weight";
    auto* w = dst.find(name);
    if (w == nullptr) throw ModelError("rollout weights: the copy has no '" + name + "'");
    w->copy_(lin->weight.to(torch::kFloat32) +
             lin->lora_b.to(torch::kFloat32).mm(lin->lora_a.to(torch::kFloat32)) * lin->lora_scale);
    merged.insert(name);
  }
  // 2. Every other weight as it is.
  for (const auto& item : policy_->named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    if (name.ends_with("lora_a") || name.ends_with("lora_b") || merged.count(name)) continue;
    auto* w = dst.find(name);
    if (w == nullptr) throw ModelError("rollout weights: the copy has no '" + name + "'");
    w->copy_(item.value());
  }
}

}  // namespace leap::model
