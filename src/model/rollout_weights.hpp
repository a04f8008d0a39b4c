#pragma once
// A rollout copy of a policy (issue 48): the weights in the rollout dtype (bf16 on a GPU), LoRA
// adapters merged in, q/k/v and gate/up fused, refreshed from the policy before each rollout.
// Generation then runs without autocast (so a decode step can be captured in a CUDA graph) and
// with one GEMM where the policy runs three (q/k/v) or two (gate/up).
#include <torch/torch.h>

#include "model/transformer.hpp"

namespace leap::model {

/// The rollout copy of `policy`. Memory: one more copy of the weights in `dtype` on the policy's
/// device (for a 1.5B model in bf16, 3.1 GB).
class RolloutWeights {
 public:
  /// Builds the copy in `dtype` on the policy's device and fills it (refresh()). `policy` must
  /// outlive this object.
  RolloutWeights(Transformer& policy, torch::ScalarType dtype);
  /// Copies the policy's current weights, each LoRA projection merged as W + s * B A (computed
  /// in float32, then cast). After every optimizer step, before generating with model().
  /// Costs one read of the policy's weights and one write of the copy.
  void refresh();
  /// The copy (eval mode, no gradients; its projections fused).
  Transformer& model() { return copy_; }
  /// The copy's dtype.
  torch::ScalarType dtype() const { return dtype_; }

 private:
  Transformer& policy_;
  Transformer copy_{nullptr};
  torch::ScalarType dtype_;
};

}  // namespace leap::model
