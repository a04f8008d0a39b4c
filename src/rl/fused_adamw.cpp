// AdamW with a fused step per (device, dtype) group; see rl/fused_adamw.hpp.
#include "rl/fused_adamw.hpp"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <map>
#include <memory>
#include <tuple>
#include <utility>

namespace leap::rl {

namespace {

/// True for a parameter the fused kernel takes: float32/64, float16 or bfloat16, on the CPU or CUDA.
bool fusable(const at::Tensor& p) {
  const auto t = p.scalar_type();
  const bool dtype_ok = t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
  return dtype_ok && (p.device().is_cpu() || p.device().is_cuda()) && p.is_contiguous() && !p.is_sparse();
}

/// The tensors of one fused call: parameters of one device and dtype in one param group.
struct FusedGroup {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
};

}  // namespace

FusedAdamW::FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults)
    : torch::optim::AdamW(std::move(params), std::move(defaults)) {}

at::Tensor FusedAdamW::step(LossClosure closure) {
  at::NoGradGuard no_grad;
  at::Tensor loss;
  if (closure) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  bool all_fusable = true;
  for (auto& group : param_groups())
    for (auto& p : group.params())
      if (p.grad().defined()) all_fusable = all_fusable && fusable(p) && !p.grad().is_sparse() && fusable(p.grad());
  if (!all_fusable) {  // the unfused step for all, so no parameter is stepped twice
    torch::optim::AdamW::step();
    return loss;
  }
  for (auto& group : param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    std::map<std::pair<std::string, int>, FusedGroup> by_device_dtype;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      // 1. The state, made as torch::optim::AdamW makes it on a parameter's first step.
      auto key = p.unsafeGetTensorImpl();
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto s = std::make_unique<torch::optim::AdamWParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        if (o.amsgrad()) s->max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        it = state_.emplace(key, std::move(s)).first;
      }
      auto& s = static_cast<torch::optim::AdamWParamState&>(*it->second);
      if (o.amsgrad() && !s.max_exp_avg_sq().defined())
        s.max_exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
      // 2. The step count, on the device (the kernel adds nothing: it is advanced here first).
      StepCount& count = steps_[key];
      if (!count.on_device.defined() || count.on_device.device() != p.device() || count.value != s.step())
        count.on_device = at::full({}, static_cast<double>(s.step()), p.options().dtype(at::kFloat));
      s.step(s.step() + 1);
      count.value = s.step();
      FusedGroup& g = by_device_dtype[{p.device().str(), static_cast<int>(p.scalar_type())}];
      g.params.push_back(p);
      g.grads.push_back(p.grad());
      g.exp_avgs.push_back(s.exp_avg());
      g.exp_avg_sqs.push_back(s.exp_avg_sq());
      if (o.amsgrad()) g.max_exp_avg_sqs.push_back(s.max_exp_avg_sq());
      g.steps.push_back(count.on_device);
    }
    // 3. One fused update per device and dtype: decay, moments, bias correction, the step.
    for (auto& [unused, g] : by_device_dtype) {
      at::_foreach_add_(g.steps, 1.0);
      const auto [beta1, beta2] = o.betas();
      at::_fused_adamw_(g.params, g.grads, g.exp_avgs, g.exp_avg_sqs, g.max_exp_avg_sqs, g.steps, o.lr(), beta1, beta2,
                        o.weight_decay(), o.eps(), o.amsgrad(), /*maximize=*/false);
    }
  }
  return loss;
}

}  // namespace leap::rl
