#pragma once
// The clipped-surrogate policy loss with optional k3 KL (DESIGN.md section 4, "Loss"). Sources:
// PPO's clipped surrogate (Schulman et al., arXiv:1707.06347, section 3, eq. 7); separate
// eps_low / eps_high ("Clip-Higher", DAPO, Yu et al., arXiv:2503.14476, section 3.1); the k3 KL
// estimator as GRPO uses it (Shao et al., arXiv:2402.03300, section 4.1, eq. 4; after
// Schulman's note "Approximating KL Divergence", 2020).
#include <ATen/core/Tensor.h>

#include "rl/aggregation.hpp"

namespace leap::rl {

/// Config `loss.*`.
struct LossOptions {
  double eps_low = 0.2;    ///< lower clip: ratio >= 1 - eps_low
  double eps_high = 0.28;  ///< upper clip: ratio <= 1 + eps_high
  double kl_beta = 0.0;    ///< k3 KL weight (0: off)
};

/// The loss and its diagnostics.
struct LossTerms {
  at::Tensor loss;           ///< scalar, with autograd: sum_i w_i sum_t mask*(pg + beta*kl)
  double clip_frac_low = 0;  ///< share of masked tokens where A<0 and ratio < 1-eps_low (lower clip active)
  double clip_frac_high = 0; ///< share where A>0 and ratio > 1+eps_high
  double kl_mean = 0;        ///< mean k3 over masked tokens (0 if no ref)
  double ratio_mean = 0;     ///< mean ratio over masked tokens
};

/// Clipped surrogate (PPO; DAPO's separate eps_low / eps_high; DESIGN.md section 4) per token:
/// pg = -min(ratio*A, clamp(ratio, 1-eps_low, 1+eps_high)*A), ratio = exp(logp - old_logp); plus
/// beta * k3 KL to a reference (Schulman k3: kl = exp(ref - logp) - (ref - logp) - 1) when
/// ref_logp is defined and beta > 0. loss = sum_i weights_i * sum_t mask_{i,t} * (pg + beta*kl).
/// logp [N, C] floating (autograd), old_logp [N, C], ref_logp [N, C] or undefined (kl_mean is then
/// 0; with beta == 0 it is still reported), advantages [N] (one per sample), mask [N, C] (bool or
/// float; a float mask also scales the loss, the diagnostics count its non-zero entries),
/// weights [N] (from aggregation_weights). Everything is computed in logp's dtype and device.
/// Masked-out positions never reach the loss or the gradient, even if they hold inf or NaN.
/// The diagnostics are 0 when no token is masked in. Throws leap::Error on a shape mismatch.
LossTerms policy_loss(const at::Tensor& logp, const at::Tensor& old_logp, const at::Tensor& ref_logp,
                      const at::Tensor& advantages, const at::Tensor& mask, const at::Tensor& weights,
                      const LossOptions& opts);

}  // namespace leap::rl
