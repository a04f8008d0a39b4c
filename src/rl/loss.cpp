// Clipped-surrogate policy loss (DESIGN.md section 4).
#include "rl/loss.hpp"

#include <torch/torch.h>

#include <sstream>
#include <string>

#include "util/error.hpp"

namespace leap::rl {

namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes();
  return os.str();
}

void expect_shape(const char* name, const at::Tensor& t, at::IntArrayRef shape) {
  if (!t.defined()) throw Error(std::string("policy_loss: ") + name + " is undefined");
  if (t.sizes() != shape) {
    std::ostringstream os;
    os << shape;
    throw Error(std::string("policy_loss: ") + name + " has shape " + shape_of(t) + ", expected " +
                os.str());
  }
}

}  // namespace

LossTerms policy_loss(const at::Tensor& logp, const at::Tensor& old_logp, const at::Tensor& ref_logp,
                      const at::Tensor& advantages, const at::Tensor& mask, const at::Tensor& weights,
                      const LossOptions& opts) {
  if (!logp.defined() || logp.dim() != 2)
    throw Error("policy_loss: logp must be [N, C], got " + (logp.defined() ? shape_of(logp) : "undefined"));
  const int64_t n = logp.size(0);
  expect_shape("old_logp", old_logp, logp.sizes());
  if (ref_logp.defined()) expect_shape("ref_logp", ref_logp, logp.sizes());
  expect_shape("advantages", advantages, {n});
  expect_shape("mask", mask, logp.sizes());
  expect_shape("weights", weights, {n});

  const auto opt = logp.options();
  const torch::Tensor maskf = mask.to(opt);
  const torch::Tensor on = maskf != 0;
  const torch::Tensor zero = torch::zeros({}, opt);
  // Zeroing the log ratio (and the KL's log ratio) where masked out keeps inf/NaN padding away
  // from both the loss and the gradient.
  const torch::Tensor log_ratio = torch::where(on, logp - old_logp.to(opt), zero);
  const torch::Tensor ratio = torch::exp(log_ratio);
  const torch::Tensor adv = advantages.to(opt).unsqueeze(1);
  const torch::Tensor surr = ratio * adv;
  const torch::Tensor clipped = torch::clamp(ratio, 1.0 - opts.eps_low, 1.0 + opts.eps_high) * adv;
  torch::Tensor per_token = -torch::min(surr, clipped);

  torch::Tensor kl;
  if (ref_logp.defined()) {
    const torch::Tensor d = torch::where(on, ref_logp.to(opt) - logp, zero);
    kl = torch::exp(d) - d - 1.0;
    if (opts.kl_beta > 0) per_token = per_token + opts.kl_beta * kl;
  }
  LossTerms out;
  out.loss = (weights.to(opt).unsqueeze(1) * maskf * per_token).sum();

  torch::NoGradGuard no_grad;
  const double count = on.sum().item<double>();
  if (count > 0) {
    const torch::Tensor r = ratio.detach();
    const torch::Tensor a = adv.detach();
    out.clip_frac_low = ((a < 0) & (r < 1.0 - opts.eps_low) & on).sum().item<double>() / count;
    out.clip_frac_high = ((a > 0) & (r > 1.0 + opts.eps_high) & on).sum().item<double>() / count;
    out.ratio_mean = torch::where(on, r, zero).sum().item<double>() / count;
    if (kl.defined()) out.kl_mean = torch::where(on, kl.detach(), zero).sum().item<double>() / count;
  }
  return out;
}

}  // namespace leap::rl
