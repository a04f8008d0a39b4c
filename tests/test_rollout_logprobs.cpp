// Old log-probs from the rollout (train.old_logprobs, issue 19): the sampler's log-probs of the
// tokens it drew equal the update's no-grad forward over the same context + completion (fp32),
// with padded prompts, shared prefill and a temperature; compute_old_logprobs takes them where a
// sample has one per token and computes the others.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <random>

#include "model/generate.hpp"
#include "model/hf_config.hpp"
#include "model/transformer.hpp"
#include "rl/update.hpp"
#include "small_model.hpp"

using namespace leap;
using namespace leap::model;

namespace {

Transformer small_model(uint64_t seed) { return leap_test::small_qwen2(seed, 0.3); }

}  // namespace

TEST_CASE("rollout log-probs: the sampler's log-probs equal the update's forward, and replace it") {
  Transformer m = small_model(3);
  std::mt19937_64 rng(11);
  auto ids = [&](size_t n) {
    std::vector<int64_t> v(n);
    for (auto& t : v) t = 1 + static_cast<int64_t>(rng() % 96);
    return v;
  };
  // Two groups of identical prompts (shared prefill) of different lengths (left padding) and one
  // prompt alone.
  const auto pa = ids(23), pb = ids(9), pc = ids(15);
  const std::vector<std::vector<int64_t>> prompts = {pa, pb, pa, pc, pb, pa};
  for (double temperature : {0.7, 0.0}) {
    CAPTURE(temperature);
    SamplingParams sp;
    sp.temperature = temperature;
    sp.max_new_tokens = 20;
    sp.stop_ids = {0};
    sp.seed = 5;
    sp.top_k = temperature > 0 ? 40 : 0;  // the log-probs are before the cut, as the update's
    const auto out = generate(m, prompts, sp, nullptr);

    std::vector<rl::TrainSample> samples;
    for (size_t i = 0; i < prompts.size(); ++i) {
      REQUIRE(out[i].tokens.size() == out[i].logprobs.size());
      REQUIRE_FALSE(out[i].tokens.empty());
      rl::TrainSample s;
      s.prompt_ids = prompts[i];
      s.completion_ids = out[i].tokens;
      s.rollout_logp = out[i].logprobs;
      samples.push_back(std::move(s));
    }
    rl::UpdateOptions o;
    o.temperature = temperature > 0 ? temperature : 1.0;
    o.mini_batch_size = 4;
    o.pad_id = 0;
    // The oracle: the update's own no-grad forward over every sample.
    auto recomputed = samples;
    CHECK(rl::compute_old_logprobs(m, nullptr, recomputed, o) == samples.size());
    double worst = 0;
    for (const auto& s : recomputed) {
      REQUIRE(s.old_logp.size() == s.rollout_logp.size());
      for (size_t j = 0; j < s.old_logp.size(); ++j)
        worst = std::max(worst, static_cast<double>(std::abs(s.old_logp[j] - s.rollout_logp[j])));
    }
    CAPTURE(worst);
    CHECK(worst < 1e-4);
    CHECK(worst > 0);  // two different computations (KV-cached decode vs one forward), not a copy

    // From the rollout: no forward for samples with one log-prob per token; one sample whose
    // rollout log-probs are missing and one with the wrong count are computed.
    o.old_logprobs_from_rollout = true;
    auto taken = samples;
    taken[1].rollout_logp.clear();
    taken[4].rollout_logp.pop_back();
    CHECK(rl::compute_old_logprobs(m, nullptr, taken, o) == 2);
    for (size_t i = 0; i < taken.size(); ++i) {
      CAPTURE(i);
      // A computed sample's values depend on its batch's other rows by float rounding only.
      const bool computed = i == 1 || i == 4;
      const auto& want = computed ? recomputed[i].old_logp : samples[i].rollout_logp;
      REQUIRE(taken[i].old_logp.size() == want.size());
      double mean = 0;
      for (size_t j = 0; j < want.size(); ++j) {
        if (computed) CHECK(std::abs(taken[i].old_logp[j] - want[j]) < 1e-5);
        else CHECK(taken[i].old_logp[j] == want[j]);
        mean += taken[i].old_logp[j] / static_cast<double>(want.size());
      }
      CHECK(taken[i].old_logprob_mean == doctest::Approx(mean).epsilon(1e-9));
    }
  }
}
