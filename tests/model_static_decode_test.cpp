// Issue 48's CPU checks: static-shape decode gives the dynamic decode's tokens (greedy and
// seeded), fused projections equal the unfused ones, the rollout copy (LoRA merged) equals the
// policy, the exponential race samples the distribution; on a GPU, a decode step replayed from
// a CUDA graph gives the eager tokens (skipped without one).
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "model/generate.hpp"
#include "model/rollout_weights.hpp"
#include "model/transformer.hpp"
#include "small_model.hpp"
#include "util/error.hpp"

using namespace leap;
using namespace leap::model;

namespace {

Transformer small_model(uint64_t seed) { return leap_test::small_qwen2(seed); }

// Prompts of different lengths (so the batch is left padded), two of them identical (a shared
// prefill).
std::vector<std::vector<int64_t>> prompts_of(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int64_t>> out;
  for (size_t n : {3, 7, 12, 7}) {
    std::vector<int64_t> p(n);
    for (auto& t : p) t = static_cast<int64_t>(rng() % 97);
    out.push_back(p);
  }
  out.push_back(out[1]);
  return out;
}

// Same tokens, finish reasons, and log-probs within float rounding.
void check_same(const std::vector<Completion>& a, const std::vector<Completion>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(i);
    CHECK(a[i].tokens == b[i].tokens);
    CHECK(a[i].finish == b[i].finish);
    REQUIRE(a[i].logprobs.size() == b[i].logprobs.size());
    for (size_t t = 0; t < a[i].logprobs.size(); ++t) CHECK(std::abs(a[i].logprobs[t] - b[i].logprobs[t]) < 1e-4);
  }
}

// Logits [B, T, V] of a left-padded batch, fp32.
torch::Tensor batch_logits(Transformer& m) {
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, 97, {3, 9}, torch::kInt64);
  auto mask = torch::ones({3, 9}, torch::kInt64);
  mask[0].narrow(0, 0, 4).fill_(0);
  return m->logits(m->forward(ids, positions_from_mask(mask), mask.to(torch::kBool))).to(torch::kFloat32);
}

}  // namespace

TEST_CASE("model generate: static-shape decode gives the dynamic decode's tokens, greedy and seeded") {
  Transformer m = small_model(3);
  const auto prompts = prompts_of(5);
  struct Case {
    double temperature, top_p;
    int64_t top_k;
    uint64_t seed;
  };
  for (const Case c : {Case{0.0, 1.0, 0, 0}, Case{1.0, 1.0, 0, 11}, Case{0.8, 0.9, 0, 12}, Case{1.2, 1.0, 20, 13}}) {
    for (int64_t block : {4, 256}) {
      CAPTURE(c.temperature);
      CAPTURE(c.top_p);
      CAPTURE(c.top_k);
      CAPTURE(block);
      SamplingParams p;
      p.temperature = c.temperature;
      p.top_p = c.top_p;
      p.top_k = c.top_k;
      p.seed = c.seed;
      p.max_new_tokens = 24;
      p.stop_ids = {5, 17, 33, 60};  // rows stop at different steps
      p.window_block = block;
      p.decode = DecodeMode::Dynamic;
      const auto dynamic = generate(m, prompts, p);
      p.decode = DecodeMode::Static;
      const auto fixed = generate(m, prompts, p);
      check_same(dynamic, fixed);
      // The rows do stop at different steps (else masking finished rows would not be tested),
      // at least when sampling.
      if (c.temperature > 0) {
        size_t shortest = 1000, longest = 0;
        for (const auto& x : dynamic) {
          shortest = std::min(shortest, x.tokens.size());
          longest = std::max(longest, x.tokens.size());
        }
        CHECK(shortest < longest);
      }
    }
  }
}

TEST_CASE("model generate: decode mode graph off a GPU and a window block below 1 are errors") {
  Transformer m = small_model(3);
  SamplingParams p;
  p.max_new_tokens = 2;
  p.decode = DecodeMode::Graph;
  CHECK_THROWS_WITH_AS(generate(m, {{1, 2}}, p), doctest::Contains("needs a model on a CUDA device"), ModelError);
  p.decode = DecodeMode::Static;
  p.window_block = 0;
  CHECK_THROWS_WITH_AS(generate(m, {{1, 2}}, p), doctest::Contains("window_block"), ModelError);
}

TEST_CASE("model: fused q/k/v and gate/up projections equal the unfused ones, and follow writes to the parts") {
  Transformer m = small_model(7);
  torch::manual_seed(1);
  const auto before = batch_logits(m);
  SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = 12;
  const auto tokens_before = generate(m, prompts_of(9), p);
  m->fuse_projections();
  CHECK(m->projections_fused());
  torch::manual_seed(1);
  const auto after = batch_logits(m);
  CAPTURE((after - before).abs().max().item<double>());
  CHECK((after - before).abs().max().item<double>() < 1e-5);
  check_same(tokens_before, generate(m, prompts_of(9), p));
  // A write to a projection's own weight is seen by the fused forward (the parts are views).
  torch::NoGradGuard ng;
  Transformer ref = small_model(7);
  for (auto* mm : {&m, &ref}) (*mm)->named_parameters()["layers.1.self_attn.k_proj.weight"].mul_(1.5);
  torch::manual_seed(1);
  const auto fused_changed = batch_logits(m);
  torch::manual_seed(1);
  const auto ref_changed = batch_logits(ref);
  CHECK((fused_changed - before).abs().max().item<double>() > 1e-3);
  CHECK((fused_changed - ref_changed).abs().max().item<double>() < 1e-5);
}

TEST_CASE("model rollout weights: the copy (LoRA merged, fused) gives the policy's logits and follows its updates") {
  Transformer policy = small_model(11);
  LoraOptions lo;
  lo.rank = 4;
  policy->add_lora(lo);
  {
    torch::NoGradGuard ng;
    for (auto& [name, t] : policy->lora_state_dict()) t.normal_(0.0, 0.3);  // B != 0: the adapters change the output
  }
  Transformer plain = small_model(11);
  torch::manual_seed(2);
  const auto policy_logits = batch_logits(policy);
  torch::manual_seed(2);
  CHECK((policy_logits - batch_logits(plain)).abs().max().item<double>() > 1e-2);  // LoRA matters
  CHECK_THROWS_WITH_AS(policy->fuse_projections(), doctest::Contains("LoRA"), ModelError);

  RolloutWeights fp32(policy, torch::kFloat32);
  CHECK(fp32.model()->projections_fused());
  torch::manual_seed(2);
  auto diff = (batch_logits(fp32.model()) - policy_logits).abs().max().item<double>();
  CAPTURE(diff);
  CHECK(diff < 1e-4);
  // An update of the policy (base weight and adapter): the copy follows after refresh().
  {
    torch::NoGradGuard ng;
    auto params = policy->named_parameters();
    params["layers.0.mlp.down_proj.weight"].add_(0.1);
    params["layers.2.self_attn.v_proj.lora_b"].mul_(-1.0);
    params["norm.weight"].mul_(1.3);
  }
  torch::manual_seed(2);
  const auto updated = batch_logits(policy);
  torch::manual_seed(2);
  CHECK((batch_logits(fp32.model()) - updated).abs().max().item<double>() > 1e-3);  // stale until refreshed
  fp32.refresh();
  torch::manual_seed(2);
  diff = (batch_logits(fp32.model()) - updated).abs().max().item<double>();
  CAPTURE(diff);
  CHECK(diff < 1e-4);

  // Tied embeddings (no lm_head): the copy's head is its own embedding table, copied too.
  {
    Transformer tied = leap_test::small_qwen2(29, 0.2, /*tied=*/true);
    RolloutWeights tied_copy(tied, torch::kFloat32);
    torch::manual_seed(2);
    const auto want = batch_logits(tied);
    torch::manual_seed(2);
    CHECK((batch_logits(tied_copy.model()) - want).abs().max().item<double>() < 1e-5);
  }

  // In bf16: within bf16 rounding of the fp32 policy's logits (3 layers, logits of order 10).
  RolloutWeights bf16(policy, torch::kBFloat16);
  CHECK((bf16.model()->dtype() == torch::kBFloat16));
  torch::manual_seed(2);
  const double scale = updated.abs().max().item<double>();
  diff = (batch_logits(bf16.model()) - updated).abs().max().item<double>();
  CAPTURE(scale);
  CAPTURE(diff);
  CHECK(diff < 0.05 * scale);
}

TEST_CASE("model gpu: a decode step replayed from a CUDA graph gives the eager tokens") {
  if (!torch::cuda::is_available()) {
    std::printf("LEAP-SKIP: needs an NVIDIA GPU and its driver (torch::cuda::is_available() is false)\n");
    std::fflush(stdout);
    return;
  }
  Transformer m = small_model(3);
  m->to(torch::kCUDA);
  m->rotary.inv_freq = m->rotary.inv_freq.to(torch::kCUDA);
  const auto prompts = prompts_of(5);
  for (double temperature : {0.0, 1.0}) {
    for (int64_t block : {4, 256}) {
      CAPTURE(temperature);
      CAPTURE(block);
      SamplingParams p;
      p.temperature = temperature;
      p.seed = 21;
      p.max_new_tokens = 24;
      p.stop_ids = {5, 17, 33, 60};
      p.window_block = block;
      p.decode = DecodeMode::Static;
      const auto eager = generate(m, prompts, p);
      p.decode = DecodeMode::Graph;
      check_same(eager, generate(m, prompts, p));
      p.decode = DecodeMode::Dynamic;  // the same noise per row: the dynamic loop agrees too
      check_same(eager, generate(m, prompts, p));
    }
  }
  // A bf16 rollout copy decodes through graphs too (no autocast).
  RolloutWeights copy(m, torch::kBFloat16);
  SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = 16;
  p.decode = DecodeMode::Static;
  const auto eager = generate(copy.model(), prompts, p);
  p.decode = DecodeMode::Graph;
  check_same(eager, generate(copy.model(), prompts, p));
}

TEST_CASE("model: a grouped-query decode step off the CPU kernel (float64 here, as bf16 or a GPU) equals the full forward") {
  // float64 takes the path a GPU or bf16 decode step takes (the CPU kernel is float32 only):
  // the query heads of each key/value head as query positions of one SDPA call.
  Transformer m = small_model(19);
  m->to(torch::kFloat64);
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, 97, {3, 10}, torch::kInt64);
  auto mask = torch::ones({3, 10}, torch::kInt64);
  mask[1].narrow(0, 0, 3).fill_(0);  // row 1 left padded
  const auto positions = positions_from_mask(mask);
  const auto full = m->logits(m->forward(ids, positions, mask.to(torch::kBool)));
  // The first 6 columns as a prefill, then one column at a time through the cache.
  KVCache cache = m->make_cache(3, 10);
  m->forward(ids.narrow(1, 0, 6), positions.narrow(1, 0, 6), mask.narrow(1, 0, 6).to(torch::kBool), &cache);
  for (int64_t t = 6; t < 10; ++t) {
    auto h = m->forward(ids.narrow(1, t, 1), positions.narrow(1, t, 1), mask.narrow(1, 0, t + 1).to(torch::kBool), &cache);
    const double diff = (m->logits(h).select(1, 0) - full.select(1, t)).abs().max().item<double>();
    CAPTURE(t);
    CHECK(diff < 1e-10);
  }
}

TEST_CASE("model: a padded grouped-query forward off the CPU's float32 path (float64 here, as bf16 or a GPU) equals the float32 one, gradients too") {
  // float64 takes the path of a GPU or bf16 prefill and training forward with a mask: K and V
  // repeated to the query heads, SDPA without enable_gqa. The float32 CPU path is the reference.
  Transformer m32 = small_model(23);
  Transformer m64 = small_model(23);
  m64->to(torch::kFloat64);
  auto ids = torch::randint(0, 97, {3, 12}, torch::kInt64);
  auto mask = torch::ones({3, 12}, torch::kInt64);
  mask[0].narrow(0, 0, 5).fill_(0);
  mask[2].narrow(0, 0, 2).fill_(0);
  const auto positions = positions_from_mask(mask);
  const auto key_mask = mask.to(torch::kBool);
  auto l32 = m32->logits(m32->forward(ids, positions, key_mask));
  auto l64 = m64->logits(m64->forward(ids, positions, key_mask));
  const auto real = mask.to(torch::kBool).unsqueeze(-1);  // padded positions' outputs are not used
  const double diff = (l64.to(torch::kFloat32) - l32).masked_fill(real.logical_not(), 0).abs().max().item<double>();
  CAPTURE(diff);
  CHECK(diff < 1e-4);
  // Gradients of the same loss: equal within float32 rounding.
  (l32.masked_fill(real.logical_not(), 0).square().sum()).backward();
  (l64.masked_fill(real.logical_not(), 0).square().sum()).backward();
  auto p32 = m32->named_parameters();
  for (const auto& item : m64->named_parameters()) {
    const auto& g64 = item.value().grad();
    const auto& g32 = p32[item.key()].grad();
    REQUIRE(g64.defined());
    const double scale = g64.abs().max().item<double>() + 1e-6;
    CAPTURE(item.key());
    CHECK((g64.to(torch::kFloat32) - g32).abs().max().item<double>() / scale < 1e-3);
  }
}
