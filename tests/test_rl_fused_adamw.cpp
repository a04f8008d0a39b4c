// FusedAdamW (rl/fused_adamw.hpp) against torch::optim::AdamW, LibTorch's own unfused step: the
// same parameters after several steps, and the same state through torch::save / torch::load.
#include <doctest/doctest.h>

#include <torch/serialize.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <vector>

#include "rl/fused_adamw.hpp"

using namespace leap;

TEST_SUITE_BEGIN("rl");

namespace {

/// Three parameters of different shapes (float32, CPU), drawn from `seed`, leaves with grad.
std::vector<at::Tensor> make_params(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> ps = {torch::randn({7, 5}), torch::randn({13}), torch::randn({2, 3, 4})};
  for (auto& p : ps) p.requires_grad_(true);
  return ps;
}

std::vector<at::Tensor> clone_params(const std::vector<at::Tensor>& ps) {
  std::vector<at::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

/// Gives both parameter lists the same gradients for step `k` (the second parameter none on odd
/// steps: a parameter without a gradient is not stepped, its count not advanced).
void set_grads(std::vector<at::Tensor>& a, std::vector<at::Tensor>& b, int k) {
  torch::manual_seed(1000 + k);
  for (size_t i = 0; i < a.size(); ++i) {
    if (i == 1 && k % 2 == 1) {
      a[i].mutable_grad() = at::Tensor();
      b[i].mutable_grad() = at::Tensor();
      continue;
    }
    auto g = torch::randn_like(a[i]) * (0.1 + k);
    a[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = g.clone();
  }
}

/// The largest |a - b| over the lists; +inf when any difference is NaN (std::max would drop it).
double max_diff(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = (a[i] - b[i]).abs().max().item<double>();
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

/// Steps `k` = from .. to-1 of both optimizers, each with set_grads' gradients for step k.
void step_both(torch::optim::Optimizer& ref, std::vector<at::Tensor>& ref_params, torch::optim::Optimizer& fused,
               std::vector<at::Tensor>& fused_params, int from, int to) {
  for (int k = from; k < to; ++k) {
    set_grads(ref_params, fused_params, k);
    ref.step();
    fused.step();
  }
}

torch::optim::AdamWOptions options(bool amsgrad) {
  return torch::optim::AdamWOptions(3e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1).amsgrad(amsgrad);
}

}  // namespace

TEST_CASE("rl fused adamw: the fused step equals torch::optim::AdamW's, with and without AMSGrad") {
  for (bool amsgrad : {false, true}) {
    CAPTURE(amsgrad);
    auto ref_params = make_params(7);
    auto fused_params = clone_params(ref_params);
    torch::optim::AdamW ref(ref_params, options(amsgrad));
    rl::FusedAdamW fused(fused_params, options(amsgrad));
    for (int k = 0; k < 8; ++k) {
      step_both(ref, ref_params, fused, fused_params, k, k + 1);
      CAPTURE(k);
      CHECK(max_diff(ref_params, fused_params) < 2e-6);
    }
    // The parameters moved (a step that did nothing would also agree with itself).
    CHECK(max_diff(fused_params, make_params(7)) > 0.05);
    // The saved state is AdamW's: the counts and the moments.
    for (size_t i = 0; i < ref_params.size(); ++i) {
      auto& rs = static_cast<torch::optim::AdamWParamState&>(*ref.state().at(ref_params[i].unsafeGetTensorImpl()));
      auto& fs = static_cast<torch::optim::AdamWParamState&>(*fused.state().at(fused_params[i].unsafeGetTensorImpl()));
      CHECK(fs.step() == rs.step());
      CHECK((fs.exp_avg() - rs.exp_avg()).abs().max().item<double>() < 1e-6);
      CHECK((fs.exp_avg_sq() - rs.exp_avg_sq()).abs().max().item<double>() < 1e-6);
    }
    CHECK(static_cast<torch::optim::AdamWParamState&>(*fused.state().at(fused_params[1].unsafeGetTensorImpl())).step() == 4);
  }
}

TEST_CASE("rl fused adamw: a state saved and loaded (a checkpoint) goes on as the unfused optimizer does") {
  auto ref_params = make_params(11);
  auto fused_params = clone_params(ref_params);
  torch::optim::AdamW ref(ref_params, options(false));
  rl::FusedAdamW fused(fused_params, options(false));
  step_both(ref, ref_params, fused, fused_params, 0, 3);
  // `saved_by`'s state loaded into a new fused optimizer over copies of `values` (a resumed run:
  // new parameter tensors holding the same values), then stepped beside the reference.
  const auto resume_and_step = [&](torch::optim::Optimizer& saved_by, const std::vector<at::Tensor>& values,
                                   int64_t from, int64_t to) {
    std::stringstream saved;
    torch::save(saved_by, saved);
    auto params = clone_params(values);
    rl::FusedAdamW resumed(params, options(false));
    torch::load(resumed, saved);
    step_both(ref, ref_params, resumed, params, from, to);
    CHECK(max_diff(ref_params, params) < 2e-6);
  };
  resume_and_step(fused, fused_params, 3, 7);
  // A state saved by the unfused optimizer loads into the fused one too (older checkpoints).
  resume_and_step(ref, ref_params, 9, 10);
}

TEST_CASE("rl fused adamw: a parameter the fused kernel does not take steps all by the unfused path") {
  // A non-contiguous parameter view: torch::optim::AdamW steps every parameter, none twice.
  auto ref_params = make_params(3);
  ref_params.push_back(torch::randn({4, 6}).t().detach().requires_grad_(true));
  std::vector<at::Tensor> fused_params;
  for (const auto& p : ref_params)  // the same values and strides
    fused_params.push_back(p.detach().clone(at::MemoryFormat::Preserve).requires_grad_(true));
  REQUIRE_FALSE(fused_params.back().is_contiguous());
  torch::optim::AdamW ref(ref_params, options(false));
  rl::FusedAdamW fused(fused_params, options(false));
  step_both(ref, ref_params, fused, fused_params, 0, 3);
  CHECK(max_diff(ref_params, fused_params) < 1e-6);
}
