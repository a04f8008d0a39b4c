// sample_next draws from softmax(logits / T) after top-k / top-p: frequencies over many draws
// match the probabilities, cut tokens are never drawn, and a seed reproduces the draws.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "model/generate.hpp"

using namespace leap::model;

TEST_CASE("model sampling: inverse-CDF draws follow the distribution, top-k and top-p cuts are never drawn") {
  const std::vector<double> p = {0.05, 0.25, 0.0001, 0.3, 0.3999};
  auto logits = torch::log(torch::tensor(p, torch::kFloat32)).unsqueeze(0).expand({4000, 5}).contiguous();
  auto gen = at::globalContext().defaultGenerator(torch::kCPU).clone();
  gen.set_current_seed(7);
  SamplingParams sp;
  sp.temperature = 1.0;
  std::vector<double> count(5, 0);
  double n = 0;
  for (int rep = 0; rep < 10; ++rep) {
    auto [next, lp] = sample_next(logits, sp, gen);
    auto a = next.accessor<int64_t, 1>();
    auto l = lp.accessor<float, 1>();
    for (int64_t i = 0; i < next.size(0); ++i) {
      REQUIRE(a[i] >= 0);
      REQUIRE(a[i] < 5);
      count[static_cast<size_t>(a[i])] += 1;
      CHECK(std::abs(l[i] - std::log(p[static_cast<size_t>(a[i])])) < 1e-4);
    }
    n += static_cast<double>(next.size(0));
  }
  // Chi-square over the four likely tokens (3 degrees of freedom: 16.3 is the 0.999 quantile).
  double chi2 = 0;
  for (size_t k : {0, 1, 3, 4}) chi2 += std::pow(count[k] - n * p[k], 2) / (n * p[k]);
  CAPTURE(chi2);
  CHECK(chi2 < 16.3);
  // top_k = 2 keeps tokens 3 and 4 only, renormalised (0.3 / 0.6999 and 0.3999 / 0.6999).
  sp.top_k = 2;
  auto [k2, lk2] = sample_next(logits, sp, gen);
  const double share3 = (k2 == 3).sum().item<double>() / 4000.0;
  CHECK(((k2 == 3).logical_or(k2 == 4)).all().item<bool>());
  CHECK(std::abs(share3 - 0.3 / 0.6999) < 0.03);
  // top_p = 0.5 keeps the smallest set with mass >= 0.5: tokens 4 then 3.
  sp.top_k = 0;
  sp.top_p = 0.5;
  auto [k3, lk3] = sample_next(logits, sp, gen);
  CHECK(((k3 == 3).logical_or(k3 == 4)).all().item<bool>());
  // A seed reproduces the draws; another seed gives others.
  sp.top_p = 1.0;
  gen.set_current_seed(11);
  auto a1 = sample_next(logits, sp, gen).first;
  gen.set_current_seed(11);
  auto a2 = sample_next(logits, sp, gen).first;
  gen.set_current_seed(12);
  auto a3 = sample_next(logits, sp, gen).first;
  CHECK(torch::equal(a1, a2));
  CHECK(!torch::equal(a1, a3));
}
