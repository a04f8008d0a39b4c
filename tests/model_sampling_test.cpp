// sample_next / sample_with_noise draw from softmax(logits / T) after top-k / top-p: frequencies
// over many draws match the probabilities, cut tokens are never drawn, and a seed reproduces the
// draws. Both ways are checked: inverse CDF (a CPU's noise) and the exponential race (a GPU's).
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "model/generate.hpp"

using namespace leap::model;

namespace {

const std::vector<double> kProbs = {0.05, 0.25, 0.0001, 0.3, 0.3999};

/// Checks `draw` (next tokens [4000] for 4000 rows of logits of kProbs under the given params):
/// the frequencies (chi-square over the four likely tokens, 3 degrees of freedom: 16.3 is the
/// 0.999 quantile), the log-probs, top-k 2 and top-p 0.5 (tokens 3 and 4 only).
void check_draws(const std::function<std::pair<torch::Tensor, torch::Tensor>(const torch::Tensor&, const SamplingParams&)>& draw) {
  auto logits = torch::log(torch::tensor(kProbs, torch::kFloat32)).unsqueeze(0).expand({4000, 5}).contiguous();
  SamplingParams sp;
  sp.temperature = 1.0;
  std::vector<double> count(5, 0);
  double n = 0;
  for (int rep = 0; rep < 10; ++rep) {
    auto [next, lp] = draw(logits, sp);
    auto a = next.accessor<int64_t, 1>();
    auto l = lp.accessor<float, 1>();
    for (int64_t i = 0; i < next.size(0); ++i) {
      REQUIRE(a[i] >= 0);
      REQUIRE(a[i] < 5);
      count[static_cast<size_t>(a[i])] += 1;
      CHECK(std::abs(l[i] - std::log(kProbs[static_cast<size_t>(a[i])])) < 1e-4);
    }
    n += static_cast<double>(next.size(0));
  }
  double chi2 = 0;
  for (size_t k : {0, 1, 3, 4}) chi2 += std::pow(count[k] - n * kProbs[k], 2) / (n * kProbs[k]);
  CAPTURE(chi2);
  CHECK(chi2 < 16.3);
  // top_k = 2 keeps tokens 3 and 4 only, renormalised (0.3 / 0.6999 and 0.3999 / 0.6999).
  sp.top_k = 2;
  auto k2 = draw(logits, sp).first;
  CHECK(((k2 == 3).logical_or(k2 == 4)).all().item<bool>());
  CHECK(std::abs((k2 == 3).sum().item<double>() / 4000.0 - 0.3 / 0.6999) < 0.03);
  // top_p = 0.5 keeps the smallest set with mass >= 0.5: tokens 4 then 3.
  sp.top_k = 0;
  sp.top_p = 0.5;
  auto k3 = draw(logits, sp).first;
  CHECK(((k3 == 3).logical_or(k3 == 4)).all().item<bool>());
}

}  // namespace

TEST_CASE("model sampling: inverse-CDF draws follow the distribution, top-k and top-p cuts are never drawn") {
  auto gen = at::globalContext().defaultGenerator(torch::kCPU).clone();
  gen.set_current_seed(7);
  check_draws([&](const torch::Tensor& logits, const SamplingParams& sp) { return sample_next(logits, sp, gen); });
  // A seed reproduces the draws; another seed gives others.
  auto logits = torch::log(torch::tensor(kProbs, torch::kFloat32)).unsqueeze(0).expand({4000, 5}).contiguous();
  SamplingParams sp;
  gen.set_current_seed(11);
  auto a1 = sample_next(logits, sp, gen).first;
  gen.set_current_seed(11);
  auto a2 = sample_next(logits, sp, gen).first;
  gen.set_current_seed(12);
  auto a3 = sample_next(logits, sp, gen).first;
  CHECK(torch::equal(a1, a2));
  CHECK(!torch::equal(a1, a3));
  // sampling_noise on a CPU: one float64 uniform per row; none when greedy.
  auto u = sampling_noise(3, 97, torch::kCPU, 1.0, gen);
  CHECK(u.size(0) == 3);
  CHECK(u.size(1) == 1);
  CHECK((u.scalar_type() == torch::kFloat64));
  CHECK(!sampling_noise(3, 97, torch::kCPU, 0.0, gen).defined());
}

TEST_CASE("model sampling: the exponential race draws each token with its probability, cut tokens never") {
  auto gen = at::globalContext().defaultGenerator(torch::kCPU).clone();
  gen.set_current_seed(7);
  check_draws([&](const torch::Tensor& logits, const SamplingParams& sp) {
    return sample_with_noise(logits, sp, at::empty(logits.sizes(), torch::kFloat32).exponential_(1.0, gen));
  });
  // A variate of (almost) zero on a cut token does not pick it.
  auto logits = torch::log(torch::tensor(kProbs, torch::kFloat32)).unsqueeze(0);
  SamplingParams sp;
  sp.top_k = 2;
  auto noise = torch::ones({1, 5});
  noise[0][0] = 0.0f;
  noise.clamp_min_(std::numeric_limits<float>::min());
  CHECK(sample_with_noise(logits, sp, noise).first.item<int64_t>() != 0);
}
