#pragma once
// AdamW whose step is one fused kernel per (device, dtype) group of parameters
// (at::_fused_adamw_, the kernel behind PyTorch's `AdamW(fused=True)`), not the 8-10 launches per
// parameter of torch::optim::AdamW::step (issue "GPU II", item 3: 3-4k launches a step at 1.5B).
// The same update (Loshchilov & Hutter, "Decoupled Weight Decay Regularization", Algorithm 2, as
// torch::optim::AdamW computes it) and the same state (AdamWParamState: exp_avg, exp_avg_sq, step),
// so `torch::save` / `torch::load` of the optimizer and checkpoints stay as they were.
#include <torch/optim/adamw.h>

#include <unordered_map>
#include <vector>

namespace leap::rl {

/// torch::optim::AdamW with a fused step (AMSGrad included). When any parameter with a gradient
/// is on a device or of a dtype the fused kernel does not take (anything but contiguous
/// float32/float64/float16/bfloat16 on the CPU or CUDA), torch::optim::AdamW::step steps them
/// all, as before. Each
/// parameter's step count lives twice: as AdamWParamState::step (int64, on the host: what is
/// saved) and as a float32 scalar on the parameter's device (what the kernel reads), made again
/// from the first whenever they disagree (a fresh state, a loaded checkpoint): no host sync a step.
class FusedAdamW : public torch::optim::AdamW {
 public:
  explicit FusedAdamW(std::vector<at::Tensor> params, torch::optim::AdamWOptions defaults = {});
  /// One AdamW step over every parameter with a gradient; `closure` as torch::optim::AdamW's.
  at::Tensor step(LossClosure closure = nullptr) override;

 private:
  struct StepCount {
    at::Tensor on_device;  ///< [] float32 on the parameter's device
    int64_t value = -1;    ///< the count `on_device` holds
  };
  std::unordered_map<const void*, StepCount> steps_;
};

}  // namespace leap::rl
