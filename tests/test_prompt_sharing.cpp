// Prompt sharing (issue 19): the shared-prefix forward gives the log-probs and the parameter
// gradients of the unshared forward on the same rows (fp32), the update with sharing equals the
// update without, the planner shares what it can, and prefill sharing leaves generation as it was;
// samples scored inside another row (ScoreSpans) and skipped zero-advantage samples change nothing.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <random>

#include "model/generate.hpp"
#include "model/hf_config.hpp"
#include "model/transformer.hpp"
#include "rl/prompt_sharing.hpp"
#include "rl/update.hpp"
#include "small_model.hpp"

using namespace leap;
using namespace leap::model;

namespace {

// A small random Qwen2-style model (GQA, qkv bias, untied head) in fp32.
Transformer small_model(uint64_t seed, bool tied = false, int64_t max_positions = 512) {
  return leap_test::small_qwen2(seed, 0.2, tied, max_positions);
}

std::vector<int64_t> random_ids(std::mt19937_64& rng, size_t n) {
  std::vector<int64_t> v(n);
  for (auto& t : v) t = static_cast<int64_t>(rng() % 97);
  return v;
}

torch::Tensor ids_tensor(const std::vector<std::vector<int64_t>>& rows, int64_t width, bool left, torch::Tensor* mask) {
  const int64_t B = static_cast<int64_t>(rows.size());
  auto t = torch::zeros({B, width}, torch::kInt64);
  auto m = torch::zeros({B, width}, torch::kInt64);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = static_cast<int64_t>(rows[b].size());
    const int64_t off = left ? width - n : 0;
    for (int64_t j = 0; j < n; ++j) {
      t[b][off + j] = rows[b][j];
      m[b][off + j] = 1;
    }
  }
  *mask = m;
  return t;
}

std::vector<torch::Tensor> grads_of(Transformer& m) {
  std::vector<torch::Tensor> g;
  for (auto& p : m->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return g;
}

double max_abs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

/// One update of a fresh small_model(model_seed): old and reference (small_model(model_seed + 1))
/// log-probs, the policy moved by 0.01 so the ratios and clipping are exercised, one ppo_update
/// with SGD(0.5) under `o`. Returns the samples with their log-probs, the weights and the stats.
struct UpdateRun {
  std::vector<rl::TrainSample> data;
  std::vector<torch::Tensor> weights;
  rl::UpdateStats stats;
};
UpdateRun run_update(const std::vector<rl::TrainSample>& samples, uint64_t model_seed, const rl::UpdateOptions& o,
                     int64_t max_positions = 512) {
  auto model = small_model(model_seed, false, max_positions);
  auto ref = small_model(model_seed + 1, false, max_positions);
  UpdateRun run{samples, {}, {}};
  rl::compute_old_logprobs(model, &ref, run.data, o);
  {
    torch::NoGradGuard ng;
    for (auto& p : model->parameters()) p.add_(0.01 * torch::ones_like(p));
  }
  std::vector<at::Tensor> params;
  for (auto& p : model->parameters()) params.push_back(p);
  torch::optim::SGD opt(params, torch::optim::SGDOptions(0.5));
  run.stats = rl::ppo_update(model, opt, params, run.data, o);
  for (auto& p : model->parameters()) run.weights.push_back(p.detach().clone());
  return run;
}

/// Checks that two run_update results (unshared a, shared b) agree: old and reference log-probs,
/// weights (and that the update moved them), loss and KL.
void check_same_update(const UpdateRun& a, const UpdateRun& b, uint64_t model_seed, int64_t max_positions = 512) {
  double lp_diff = 0;
  for (size_t i = 0; i < a.data.size(); ++i)
    for (size_t j = 0; j < a.data[i].old_logp.size(); ++j) {
      lp_diff = std::max(lp_diff, std::abs(static_cast<double>(a.data[i].old_logp[j] - b.data[i].old_logp[j])));
      lp_diff = std::max(lp_diff, std::abs(static_cast<double>(a.data[i].ref_logp[j] - b.data[i].ref_logp[j])));
    }
  CHECK(lp_diff < 2e-5);
  double w_diff = 0, moved = 0;
  auto start = small_model(model_seed, false, max_positions);
  auto sp = start->parameters();
  for (size_t i = 0; i < a.weights.size(); ++i) {
    w_diff = std::max(w_diff, max_abs(a.weights[i] - b.weights[i]));
    moved = std::max(moved, max_abs(a.weights[i] - (sp[i].detach() + 0.01)));
  }
  CAPTURE(w_diff);
  CAPTURE(moved);
  REQUIRE(moved > 1e-3);  // the update did something
  CHECK(w_diff < 1e-5 * std::max(1.0, moved) + 1e-6);
  CHECK(a.stats.loss == doctest::Approx(b.stats.loss).epsilon(1e-4));
  CHECK(a.stats.kl == doctest::Approx(b.stats.kl).epsilon(1e-3));
}

/// Largest |old log-prob - the log-prob of the sample's own row run alone| over the samples of a
/// run_update (small_model(model_seed) at temperature 0.9): independent of the batching (padding,
/// parts, row order, shared prefixes).
double max_diff_to_own_rows(const UpdateRun& run, uint64_t model_seed, int64_t max_positions = 512) {
  auto model = small_model(model_seed, false, max_positions);
  torch::NoGradGuard ng;
  double diff = 0;
  for (const auto& s : run.data) {
    auto row = s.prompt_ids;
    row.insert(row.end(), s.completion_ids.begin(), s.completion_ids.end());
    auto t = torch::tensor(row, torch::kInt64).unsqueeze(0);
    const int64_t C = static_cast<int64_t>(s.completion_ids.size());
    auto lp = completion_logprobs(model, t, {}, C, 0.9).logprobs[0];
    for (int64_t j = 0; j < C; ++j)
      diff = std::max(diff, std::abs(lp[j].item<double>() - static_cast<double>(s.old_logp[static_cast<size_t>(j)])));
  }
  return diff;
}

}  // namespace

TEST_CASE("prompt sharing: planner units, prefix lengths and the token fraction") {
  const std::vector<int64_t> task = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  auto with = [&](std::vector<int64_t> tail) {
    auto v = task;
    v.insert(v.end(), tail.begin(), tail.end());
    return v;
  };
  // A group's turn 1 three times, two turn-2 contexts of the same task, an unrelated prompt.
  const std::vector<std::vector<int64_t>> p = {task, with({50, 51}), task, {90, 91, 92}, with({60}), task};
  std::vector<const std::vector<int64_t>*> ptrs;
  for (auto& x : p) ptrs.push_back(&x);
  auto plan = rl::plan_prompt_sharing(ptrs, 4);
  REQUIRE(plan.size() == 2);
  std::vector<int> seen(p.size(), 0);
  for (auto& u : plan)
    for (size_t m : u.members) seen[m] += 1;
  CHECK(seen == std::vector<int>(p.size(), 1));
  // The task's five contexts form one unit sharing 9 tokens (each member keeps >= 1 of its own).
  const auto& big = plan[0].members.size() == 5 ? plan[0] : plan[1];
  const auto& lone = plan[0].members.size() == 5 ? plan[1] : plan[0];
  CHECK(big.members.size() == 5);
  CHECK(big.prefix_len == 9);
  CHECK(lone.members == std::vector<size_t>{3});
  CHECK(lone.prefix_len == 2);
  // Runs 9 + (1+3+1+1+2) + 2 + 1 = 20 of the 10+12+10+3+11+10 = 56 context tokens.
  CHECK(rl::shared_prompt_fraction(ptrs, plan) == doctest::Approx(20.0 / 56.0));
  // A prompt of one token: nothing is planned (the unshared path runs).
  const std::vector<int64_t> one = {7};
  ptrs.push_back(&one);
  CHECK(rl::plan_prompt_sharing(ptrs, 4).empty());
  // Prefixes shorter than min_prefix are not shared.
  const std::vector<std::vector<int64_t>> q = {{1, 2, 3, 9}, {1, 2, 3, 8}};
  std::vector<const std::vector<int64_t>*> qp = {&q[0], &q[1]};
  CHECK(rl::plan_prompt_sharing(qp, 4).size() == 2);
  CHECK(rl::plan_prompt_sharing(qp, 3).size() == 1);
  // Three rows that share a long context (the task, then 20 more tokens) and one that shares
  // only the task, sorted first: the long context is a unit of its own (30 + 3 x 3 + 15 = 54
  // tokens run), not one unit on the task (10 + 5 + 3 x 23 = 84).
  std::vector<int64_t> ctx = task;
  for (int64_t t = 0; t < 20; ++t) ctx.push_back(40 + t);
  std::vector<std::vector<int64_t>> r = {with({11, 12, 13, 14, 15}), ctx, ctx, ctx};
  for (int64_t k = 1; k <= 3; ++k) r[static_cast<size_t>(k)].insert(r[static_cast<size_t>(k)].end(), {k, k + 1, k + 2});
  std::vector<const std::vector<int64_t>*> rp;
  for (auto& x : r) rp.push_back(&x);
  const auto rplan = rl::plan_prompt_sharing(rp, 4);
  REQUIRE(rplan.size() == 2);
  const auto& long_unit = rplan[0].members.size() == 3 ? rplan[0] : rplan[1];
  CHECK(long_unit.members.size() == 3);
  CHECK(long_unit.prefix_len == 30);
  CHECK(rl::shared_prompt_fraction(rp, rplan) == doctest::Approx(54.0 / 114.0));
}

TEST_CASE("prompt sharing: shared-prefix log-probs, entropies and gradients equal the unshared forward (fp32)") {
  for (const bool checkpointing : {false, true}) {
    for (const bool tied : {false, true}) {
      CAPTURE(checkpointing);
      CAPTURE(tied);
      auto model = small_model(11, tied);
      model->set_gradient_checkpointing(checkpointing);
      std::mt19937_64 rng(5);
      // Two prefixes (lengths 20 and 13); rows 0-2 continue prefix 0, row 3 prefix 1.
      const std::vector<std::vector<int64_t>> prefixes = {random_ids(rng, 20), random_ids(rng, 13)};
      const std::vector<int64_t> row_prefix = {0, 0, 1, 0};
      const std::vector<size_t> rest_len = {1, 3, 2, 5}, comp_len = {4, 6, 6, 2};
      std::vector<std::vector<int64_t>> rests, comps, full_prompts;
      for (size_t b = 0; b < 4; ++b) {
        rests.push_back(random_ids(rng, rest_len[b]));
        comps.push_back(random_ids(rng, comp_len[b]));
        auto fp = prefixes[static_cast<size_t>(row_prefix[b])];
        fp.insert(fp.end(), rests[b].begin(), rests[b].end());
        full_prompts.push_back(fp);
      }
      const int64_t C = 6;
      // Unshared rows: [pad.. prefix rest | completion ..pad].
      auto rows = [&](const std::vector<std::vector<int64_t>>& prompts, torch::Tensor* mask) {
        int64_t P = 0;
        for (auto& p : prompts) P = std::max<int64_t>(P, static_cast<int64_t>(p.size()));
        torch::Tensor pm, cm;
        auto pt = ids_tensor(prompts, P, true, &pm);
        auto ct = ids_tensor(comps, C, false, &cm);
        *mask = torch::cat({pm, cm}, 1);
        return torch::cat({pt, ct}, 1);
      };
      torch::Tensor full_mask, tail_mask, pmask;
      auto full = rows(full_prompts, &full_mask);
      auto tail = rows(rests, &tail_mask);
      auto ptok = ids_tensor(prefixes, 20, true, &pmask);
      auto prow = torch::tensor(row_prefix, torch::kInt64);
      auto cmask = full_mask.narrow(1, full.size(1) - C, C).to(torch::kFloat32);

      model->zero_grad();
      auto a = completion_logprobs(model, full, full_mask, C, 0.8, 4);
      ((a.logprobs * cmask).sum() + 0.1 * (a.entropy * cmask).sum()).backward();
      auto ga = grads_of(model);
      model->zero_grad();
      auto b = completion_logprobs_shared(model, ptok, pmask, prow, tail, tail_mask, C, 0.8, 4);
      ((b.logprobs * cmask).sum() + 0.1 * (b.entropy * cmask).sum()).backward();
      auto gb = grads_of(model);

      CHECK(max_abs((a.logprobs - b.logprobs) * cmask) < 2e-5);
      CHECK(max_abs((a.entropy - b.entropy) * cmask) < 2e-5);
      double worst = 0, scale = 0;
      for (size_t i = 0; i < ga.size(); ++i) {
        worst = std::max(worst, max_abs(ga[i] - gb[i]));
        scale = std::max(scale, max_abs(ga[i]));
      }
      CAPTURE(worst);
      CAPTURE(scale);
      REQUIRE(scale > 1e-3);
      CHECK(worst < 1e-5 * std::max(1.0, scale));
      // The check can fail: rows attached to the wrong prefix give other log-probs.
      torch::NoGradGuard ng;
      auto wrong = completion_logprobs_shared(model, ptok, pmask, torch::tensor(std::vector<int64_t>{1, 0, 0, 1}),
                                              tail, tail_mask, C, 0.8, 4);
      CHECK(max_abs((a.logprobs - wrong.logprobs) * cmask) > 1e-3);
    }
  }
}

TEST_CASE("prompt sharing: ppo_update with sharing equals the update without (old log-probs and weights)") {
  std::mt19937_64 rng(9);
  // Two groups of 5 samples: turn-1 contexts repeated (samples 0 and 1 with the same completion,
  // as a memorised policy writes), turn-2 contexts that extend them: sample 3 continues sample 0
  // (and so the identical sample 1), sample 4 continues sample 2, so batches score turn-1
  // samples inside turn-2 rows.
  std::vector<rl::TrainSample> samples;
  for (int g = 0; g < 2; ++g) {
    const auto task = random_ids(rng, 30 + 7 * static_cast<size_t>(g));
    for (int i = 0; i < 5; ++i) {
      rl::TrainSample s;
      s.prompt_ids = task;
      if (i >= 3) {  // long enough that the batches run these rows apart from the short ones
        const auto& earlier = samples[static_cast<size_t>(g * 5 + (i == 3 ? 0 : 2))].completion_ids;
        s.prompt_ids.insert(s.prompt_ids.end(), earlier.begin(), earlier.end());
        auto more = random_ids(rng, 40 + static_cast<size_t>(i));
        s.prompt_ids.insert(s.prompt_ids.end(), more.begin(), more.end());
      }
      s.completion_ids = i == 1 ? samples.back().completion_ids : random_ids(rng, 3 + static_cast<size_t>((g * 5 + i) % 6));
      s.advantage = (i % 2 ? 1.0 : -0.7) * (1 + 0.1 * g);
      s.segment_id = g * 5 + i;
      samples.push_back(s);
    }
  }
  rl::UpdateOptions o;
  o.mini_batch_size = 4;
  o.grad_accum = 2;
  o.seed = 1;
  o.loss.kl_beta = 0.05;
  o.temperature = 0.9;
  o.max_grad_norm = 0;
  o.share_prompts = false;
  const auto r0 = run_update(samples, 3, o);
  o.share_prompts = true;
  const auto r1 = run_update(samples, 3, o);
  const auto& s0 = r0.stats;
  const auto& s1 = r1.stats;
  CHECK(s0.samples_in_other_rows == 0);
  CHECK(s1.samples_in_other_rows >= 2);  // some turn-1 samples were scored inside turn-2 rows
  check_same_update(r0, r1, 3);
  // Independently of the batching (padding, parts, row order): each sample alone.
  CHECK(max_diff_to_own_rows(r1, 3) < 2e-5);
  CHECK(s0.entropy == doctest::Approx(s1.entropy).epsilon(1e-4));

  // The LM-head chunk (UpdateOptions::logprob_chunk; per device by default: 64 on the CPU, 512 on
  // cuda) changes how many positions' logits are held at once, not the update.
  CHECK(rl::logprob_chunk(0, false) == 64);
  CHECK(rl::logprob_chunk(0, true) == 512);
  CHECK(rl::logprob_chunk(7, true) == 7);
  o.logprob_chunk = 3;  // several chunks per completion, and spans that straddle them
  const auto r2 = run_update(samples, 3, o);
  check_same_update(r1, r2, 3);
}

TEST_CASE("prompt sharing: units of very different prefix lengths run apart, a unit of one without a prefix") {
  // One mini-batch: unit A (3 rows, a 30-token prompt, 300-token completions), unit B (3 rows, a
  // 1000-token prompt, 300-token completions) and C (one row of 100 + 50 tokens). A's rows attend
  // to their own 30 prefix columns, not to B's 1000 (A's prefix is left padded to them), and C
  // runs whole, without a prefix. The update equals the unshared one, and each sample's old
  // log-probs its own row's.
  std::mt19937_64 rng(21);
  std::vector<rl::TrainSample> samples;
  auto add = [&](const std::vector<int64_t>& prompt, size_t completion, int64_t first_token, double adv) {
    rl::TrainSample s;
    s.prompt_ids = prompt;
    s.completion_ids = random_ids(rng, completion);
    s.completion_ids[0] = first_token;  // rows of a unit differ from their first completion token on
    s.advantage = adv;
    s.segment_id = static_cast<int64_t>(samples.size());
    samples.push_back(std::move(s));
  };
  const auto a = random_ids(rng, 30), b = random_ids(rng, 1000), c = random_ids(rng, 100);
  for (int i = 0; i < 3; ++i) add(a, 300, 10 + i, i == 1 ? 1.0 : -0.5);
  for (int i = 0; i < 3; ++i) add(b, 300, 20 + i, i == 2 ? 0.8 : -0.4);
  add(c, 50, 5, 0.6);
  rl::UpdateOptions o;
  o.mini_batch_size = 8;
  o.seed = 2;
  o.loss.kl_beta = 0.05;
  o.temperature = 0.9;
  o.max_grad_norm = 0;
  o.share_prompts = false;
  const auto r0 = run_update(samples, 5, o, 2048);
  o.share_prompts = true;
  const auto r1 = run_update(samples, 5, o, 2048);
  // Token columns run (an independent count of the layout above): the two unit prefixes [2, 1000]
  // (A's 30 tokens left padded), A's and B's tails in parts of their own (3 x 300 each), C whole
  // (1 x 150). With one part for all six tails and C as a unit of one holding 149 of its tokens
  // as its prefix, it would be 3 x 1000 + 6 x 300 + 1 x 1.
  // Unshared: C with A's rows (a [4, 100 + 300] part: prompts left padded to C's, completions to
  // A's) and B's rows apart ([3, 1300]).
  CHECK(r0.stats.tokens_run == 4 * 400 + 3 * 1300);
  CHECK(r1.stats.tokens_run == 2 * 1000 + 3 * 300 + 3 * 300 + 150);
  check_same_update(r0, r1, 5, 2048);
  CHECK(max_diff_to_own_rows(r1, 5, 2048) < 2e-5);
}

TEST_CASE("prompt sharing: prefilling each distinct prompt once leaves generation unchanged") {
  auto model = small_model(21, true);
  std::mt19937_64 rng(2);
  const auto a = random_ids(rng, 12), b = random_ids(rng, 7);
  const std::vector<std::vector<int64_t>> prompts = {a, a, b, a, b};
  for (const double temperature : {0.0, 1.0}) {
    CAPTURE(temperature);
    SamplingParams p;
    p.temperature = temperature;
    p.max_new_tokens = 12;
    p.seed = 3;
    p.share_prefill = false;
    auto plain = generate(model, prompts, p);
    p.share_prefill = true;
    auto shared = generate(model, prompts, p);
    REQUIRE(plain.size() == shared.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      CHECK(plain[i].tokens == shared[i].tokens);
      for (size_t j = 0; j < plain[i].logprobs.size(); ++j)
        CHECK(std::abs(plain[i].logprobs[j] - shared[i].logprobs[j]) < 1e-4);
    }
    if (temperature > 0) CHECK(shared[0].tokens != shared[1].tokens);  // copies decode independently
  }
}

TEST_CASE("update: samples with advantage 0 are not run, and the update is the one that runs them") {
  std::mt19937_64 rng(21);
  // Group 0: every advantage 0 (equal rewards); group 1: mixed, one sample at 0.
  std::vector<rl::TrainSample> samples;
  for (int g = 0; g < 2; ++g) {
    const auto task = random_ids(rng, 25 + 4 * static_cast<size_t>(g));
    for (int i = 0; i < 6; ++i) {
      rl::TrainSample s;
      s.prompt_ids = task;
      s.completion_ids = random_ids(rng, 3 + static_cast<size_t>((g * 6 + i) % 5));
      s.advantage = g == 0 || i == 2 ? 0.0 : (i % 2 ? 0.8 : -0.6);
      s.segment_id = g * 6 + i;
      samples.push_back(s);
    }
  }
  auto zero = samples;
  for (auto& s : zero) s.advantage = 0.0;
  for (const auto agg : {rl::Aggregation::token_mean, rl::Aggregation::segment_mean}) {
    CAPTURE(static_cast<int>(agg));
    auto run = [&](bool skip) {
      auto model = small_model(5);
      std::vector<at::Tensor> params;
      for (auto& p : model->parameters()) params.push_back(p);
      // SGD with momentum: linear in the gradients (Adam would magnify rounding in near-zero
      // entries), and it still moves the weights on a step without signal.
      torch::optim::SGD opt(params, torch::optim::SGDOptions(0.2).momentum(0.9));
      rl::UpdateOptions o;
      o.skip_zero_advantage = skip;
      o.aggregation = agg;
      o.mini_batch_size = 4;
      o.seed = 3;
      o.ppo_epochs = 2;
      o.max_grad_norm = 0.5;
      std::vector<std::vector<torch::Tensor>> after;
      std::vector<rl::UpdateStats> stats;
      for (auto* batch : {&samples, &zero}) {  // the second update has no signal at all
        auto data = *batch;
        rl::compute_old_logprobs(model, nullptr, data, o);
        if (agg == rl::Aggregation::segment_mean) rl::set_step_segment_weights(data, nullptr);
        if (batch == &samples) {  // start away from the old policy so ratios and clipping matter
          torch::NoGradGuard ng;
          for (auto& p : model->parameters()) p.add_(0.1 * torch::randn_like(p));
        }
        stats.push_back(rl::ppo_update(model, opt, params, data, o));
        std::vector<torch::Tensor> w;
        for (auto& p : model->parameters()) w.push_back(p.detach().clone());
        after.push_back(w);
      }
      return std::make_pair(after, stats);
    };
    torch::manual_seed(77);
    auto [w_run, s_run] = run(false);
    torch::manual_seed(77);
    auto [w_skip, s_skip] = run(true);
    CHECK(s_run[0].samples_not_run == 0);
    CHECK(s_skip[0].samples_not_run == 2 * 7);   // 7 zero-advantage samples, 2 epochs
    CHECK(s_skip[1].samples_not_run == 2 * 12);  // nothing to run
    for (int u = 0; u < 2; ++u) {
      CAPTURE(u);
      CHECK(s_run[u].optimizer_steps == s_skip[u].optimizer_steps);
      CHECK(s_run[u].loss == doctest::Approx(s_skip[u].loss).epsilon(1e-5));
      CHECK(s_run[u].grad_norm == doctest::Approx(s_skip[u].grad_norm).epsilon(1e-4));
      CHECK(s_run[u].clip_frac_low == doctest::Approx(s_skip[u].clip_frac_low));
      CHECK(s_run[u].clip_frac_high == doctest::Approx(s_skip[u].clip_frac_high));
      double diff = 0, moved = 0;
      const auto& before = u == 0 ? std::vector<torch::Tensor>() : w_run[0];
      for (size_t i = 0; i < w_run[u].size(); ++i) {
        diff = std::max(diff, max_abs(w_run[u][i] - w_skip[u][i]));
        if (u == 1) moved = std::max(moved, max_abs(w_run[1][i] - before[i]));
      }
      CAPTURE(diff);
      CHECK(diff < 1e-6);
      // With no signal the momentum still moves the weights: the skipped path must too.
      if (u == 1) CHECK(moved > 1e-4);
    }
    CHECK(s_run[0].clip_frac_low + s_run[0].clip_frac_high > 0);  // the ratios were exercised
  }
}

TEST_CASE("update: a first update with nothing to run still counts as an Adam step") {
  std::mt19937_64 rng(23);
  std::vector<rl::TrainSample> samples;
  const auto task = random_ids(rng, 20);
  for (int i = 0; i < 4; ++i) {
    rl::TrainSample s;
    s.prompt_ids = task;
    s.completion_ids = random_ids(rng, 4 + static_cast<size_t>(i));
    s.advantage = i % 2 ? 1.0 : -1.0;
    samples.push_back(s);
  }
  auto zero = samples;
  for (auto& s : zero) s.advantage = 0.0;
  auto run = [&](bool skip) {
    auto model = small_model(6);
    std::vector<at::Tensor> params;
    for (auto& p : model->parameters()) params.push_back(p);
    torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-2));
    rl::UpdateOptions o;
    o.skip_zero_advantage = skip;
    for (auto* batch : {&zero, &samples}) {  // Adam's step count (bias correction) must agree
      auto data = *batch;
      rl::compute_old_logprobs(model, nullptr, data, o);
      rl::ppo_update(model, opt, params, data, o);
    }
    std::vector<torch::Tensor> w;
    for (auto& p : model->parameters()) w.push_back(p.detach().clone());
    return w;
  };
  const auto a = run(false), b = run(true);
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, max_abs(a[i] - b[i]));
  CAPTURE(diff);
  CHECK(diff < 1e-4);  // a missed step would change the second step by ~lr / 2 = 5e-3
}

TEST_CASE("score spans: samples scored inside another row equal their own rows, gradients add up (fp32)") {
  std::mt19937_64 rng(31);
  auto model = small_model(8);
  // Row 0: a turn-2 sample (context = turn-1 context + turn-1 completion + feedback, then its
  // completion). Scored in it: the turn-1 sample, twice (two identical samples), and itself.
  const auto ctx1 = random_ids(rng, 12), comp1 = random_ids(rng, 5), fb = random_ids(rng, 7), comp2 = random_ids(rng, 6);
  std::vector<int64_t> row = ctx1;
  row.insert(row.end(), comp1.begin(), comp1.end());
  row.insert(row.end(), fb.begin(), fb.end());
  const int64_t p2 = static_cast<int64_t>(row.size());
  row.insert(row.end(), comp2.begin(), comp2.end());
  const int64_t S = static_cast<int64_t>(row.size());
  auto tokens = torch::tensor(row, torch::kInt64).unsqueeze(0);
  ScoreSpans spans{torch::tensor(std::vector<int64_t>{0, 0, 0}, torch::kInt64),
                   torch::tensor(std::vector<int64_t>{12, 12, p2}, torch::kInt64), 6};
  auto lp = completion_logprobs(model, tokens, {}, spans, 0.8);
  REQUIRE(lp.logprobs.sizes() == torch::IntArrayRef({3, 6}));
  // The loss: turn-1 tokens (5 of the 6 columns) of both copies, turn-2 tokens.
  auto m = torch::ones({3, 6});
  m[0][5] = 0;
  m[1][5] = 0;
  (lp.logprobs * m).sum().backward();
  const auto g_spans = grads_of(model);
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  // Oracle: each sample in its own row, the plain completion_logprobs.
  std::vector<int64_t> t1 = ctx1;
  t1.insert(t1.end(), comp1.begin(), comp1.end());
  auto a = completion_logprobs(model, torch::tensor(t1, torch::kInt64).unsqueeze(0), {}, 5, 0.8);
  auto b = completion_logprobs(model, torch::tensor(row, torch::kInt64).unsqueeze(0), {}, 6, 0.8);
  CHECK(max_abs(lp.logprobs[0].narrow(0, 0, 5) - a.logprobs[0]) < 1e-5);
  CHECK(max_abs(lp.logprobs[1].narrow(0, 0, 5) - a.logprobs[0]) < 1e-5);
  CHECK(max_abs(lp.logprobs[2] - b.logprobs[0]) < 1e-5);
  CHECK(max_abs(lp.entropy[2] - b.entropy[0]) < 1e-5);
  (2 * a.logprobs.sum() + b.logprobs.sum()).backward();
  const auto g_rows = grads_of(model);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < g_rows.size(); ++i) {
    diff = std::max(diff, max_abs(g_spans[i] - g_rows[i]));
    scale = std::max(scale, max_abs(g_rows[i]));
  }
  CAPTURE(diff);
  REQUIRE(scale > 1e-3);
  CHECK(diff < 1e-5 * scale + 1e-7);
  // A span must start inside the row, after its first token.
  ScoreSpans bad{torch::tensor(std::vector<int64_t>{0}, torch::kInt64), torch::tensor(std::vector<int64_t>{0}, torch::kInt64), 2};
  CHECK_THROWS(completion_logprobs(model, tokens, {}, bad));
  bad.start = torch::tensor(std::vector<int64_t>{S}, torch::kInt64);
  CHECK_THROWS(completion_logprobs(model, tokens, {}, bad));
}

TEST_CASE("score spans: spans inside and across a shared prefix equal each sample's own row, gradients too (fp32)") {
  std::mt19937_64 rng(41);
  auto model = small_model(9);
  // Unit 0's prefix: a turn-1 context, its completion and the feedback, the identical context of
  // two turn-2 samples (rows 0 and 1: only their completions run). Unit 1's prefix: a context and
  // the first 2 tokens both completions of rows 2 and 3 start with (their spans cross into the row).
  const auto ctx1 = random_ids(rng, 12), comp1 = random_ids(rng, 5), fb = random_ids(rng, 7);
  const auto c2a = random_ids(rng, 6), c2b = random_ids(rng, 4);
  const auto ctx2 = random_ids(rng, 10), head = random_ids(rng, 2), ta = random_ids(rng, 5), tb = random_ids(rng, 3);
  auto cat = [](std::vector<std::vector<int64_t>> parts) {
    std::vector<int64_t> out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
  };
  const auto p0 = cat({ctx1, comp1, fb}), p1 = cat({ctx2, head});
  const int64_t Lp = static_cast<int64_t>(p0.size());  // 24; unit 1 (12 tokens) is left padded
  torch::Tensor pmask, tmask;
  auto ptok = ids_tensor({p0, p1}, Lp, true, &pmask);
  auto tok = ids_tensor({c2a, c2b, ta, tb}, 6, false, &tmask);  // the rows' own tokens from column 0
  auto prow = torch::tensor(std::vector<int64_t>{0, 0, 1, 1}, torch::kInt64);
  // Outputs: the turn-1 sample (inside the prefix), rows 0-1's completions (from the prefix's last
  // column), rows 2-3's completions (first 2 tokens in the prefix).
  ScoreSpans spans{torch::tensor(std::vector<int64_t>{0, 0, 1, 2, 3}, torch::kInt64),
                   torch::tensor(std::vector<int64_t>{12, Lp, Lp, Lp - 2, Lp - 2}, torch::kInt64), 7};
  const auto kv = prefix_keys_values(model, ptok, pmask);
  auto lp = continue_logprobs(model, kv, pmask, prow, tok, tmask, spans, 0.8);
  REQUIRE(lp.logprobs.sizes() == torch::IntArrayRef({5, 7}));
  const std::vector<std::vector<int64_t>> contexts = {ctx1, p0, p0, ctx2, ctx2};
  const std::vector<std::vector<int64_t>> completions = {comp1, c2a, c2b, cat({head, ta}), cat({head, tb})};
  auto m = torch::zeros({5, 7});
  for (int64_t k = 0; k < 5; ++k) m[k].narrow(0, 0, static_cast<int64_t>(completions[static_cast<size_t>(k)].size())).fill_(1.0);
  auto wk = torch::tensor(std::vector<float>{0.5f, -1.0f, 2.0f, 1.5f, -0.7f}).unsqueeze(1);
  (lp.logprobs * m * wk).sum().backward();
  const auto g_spans = grads_of(model);
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  // Oracle: each sample in its own row.
  torch::Tensor oracle_loss = torch::zeros({});
  for (size_t k = 0; k < 5; ++k) {
    const auto row = cat({contexts[k], completions[k]});
    const int64_t C = static_cast<int64_t>(completions[k].size());
    auto a = completion_logprobs(model, torch::tensor(row, torch::kInt64).unsqueeze(0), {}, C, 0.8);
    CAPTURE(k);
    CHECK(max_abs(lp.logprobs[static_cast<int64_t>(k)].narrow(0, 0, C) - a.logprobs[0]) < 1e-5);
    CHECK(max_abs(lp.entropy[static_cast<int64_t>(k)].narrow(0, 0, C) - a.entropy[0]) < 1e-5);
    oracle_loss = oracle_loss + wk[static_cast<int64_t>(k)][0] * a.logprobs.sum();
  }
  oracle_loss.backward();
  const auto g_rows = grads_of(model);
  double diff = 0, scale = 0;
  for (size_t i = 0; i < g_rows.size(); ++i) {
    diff = std::max(diff, max_abs(g_spans[i] - g_rows[i]));
    scale = std::max(scale, max_abs(g_rows[i]));
  }
  CAPTURE(diff);
  REQUIRE(scale > 1e-3);
  CHECK(diff < 1e-5 * scale + 1e-7);
  // The same with layer checkpointing (the last layer runs its queries only where spans read).
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  model->set_gradient_checkpointing(true);
  {
    const auto kv2 = prefix_keys_values(model, ptok, pmask, 11);  // spans read from column 11 on
    auto lp2 = continue_logprobs(model, kv2, pmask, prow, tok, tmask, spans, 0.8);
    CHECK(max_abs((lp2.logprobs - lp.logprobs) * m) < 1e-5);
    (lp2.logprobs * m * wk).sum().backward();
    const auto g2 = grads_of(model);
    double diff2 = 0;
    for (size_t i = 0; i < g_rows.size(); ++i) diff2 = std::max(diff2, max_abs(g2[i] - g_rows[i]));
    CAPTURE(diff2);
    CHECK(diff2 < 1e-5 * scale + 1e-7);
    // Hidden states kept from column 12 on cannot serve a span that reads column 11.
    const auto kv3 = prefix_keys_values(model, ptok, pmask, 12);
    CHECK_THROWS(continue_logprobs(model, kv3, pmask, prow, tok, tmask, spans, 0.8));
  }
  model->set_gradient_checkpointing(false);
  // Columns count in [prefix | row]: Lp + 6 is past the end.
  ScoreSpans bad{torch::tensor(std::vector<int64_t>{0}, torch::kInt64), torch::tensor(std::vector<int64_t>{Lp + 6}, torch::kInt64), 2};
  CHECK_THROWS(continue_logprobs(model, kv, pmask, prow, tok, tmask, bad));
}

TEST_CASE("prompt sharing: identical turn-2 contexts run once with the turn-1 samples they hold, and the update is unchanged") {
  std::mt19937_64 rng(43);
  // One group: turn 1 wrote A twice and B (B starts like A); three turn-2 samples share the
  // context task + A + feedback and differ in their completions (two start alike).
  const auto task = random_ids(rng, 30), A = random_ids(rng, 8), fb = random_ids(rng, 20);
  auto B = A;
  for (size_t j = 3; j < B.size(); ++j) B[j] = (A[j] + 1) % 97;
  std::vector<int64_t> ctx2 = task;
  ctx2.insert(ctx2.end(), A.begin(), A.end());
  ctx2.insert(ctx2.end(), fb.begin(), fb.end());
  std::vector<std::vector<int64_t>> comp2 = {{5, 6, 7, 8, 9, 10}, {5, 6, 11, 12, 13, 14}, {15, 16, 17, 18, 19, 20}};
  std::vector<rl::TrainSample> samples;
  auto add = [&](const std::vector<int64_t>& ctx, const std::vector<int64_t>& comp, double adv) {
    rl::TrainSample s;
    s.prompt_ids = ctx;
    s.completion_ids = comp;
    s.advantage = adv;
    s.segment_id = static_cast<int64_t>(samples.size());
    samples.push_back(s);
  };
  add(task, A, -0.5);
  add(task, A, -0.5);
  add(task, B, 1.0);
  for (size_t k = 0; k < 3; ++k) add(ctx2, comp2[k], k == 1 ? 1.2 : -0.4);
  rl::UpdateOptions o;
  o.mini_batch_size = 6;
  o.seed = 2;
  o.loss.kl_beta = 0.05;
  o.temperature = 0.9;
  o.max_grad_norm = 0;
  o.share_prompts = false;
  const auto r0 = run_update(samples, 13, o);
  o.share_prompts = true;
  const auto r1 = run_update(samples, 13, o);
  const auto& s0 = r0.stats;
  const auto& s1 = r1.stats;
  // Unshared: the 3 turn-1 rows (38 tokens) and the 3 turn-2 rows (64) run as two parts. Shared: the turn-2 context (58 tokens) runs once as a
  // prefix, holding both copies of A; the turn-2 rows run only their 6 completion tokens; B is a
  // unit of its own (prefix padded to 58, one token in its row): at most 2 x 58 + 4 x 6 columns.
  CHECK(s0.tokens_run == 3 * 38 + 3 * 64);
  CAPTURE(s1.tokens_run);
  CHECK(s1.tokens_run <= 2 * 58 + 4 * 6);
  CHECK(s1.samples_in_other_rows == 2);
  check_same_update(r0, r1, 13);
}

TEST_CASE("transformer: forward with keep_from returns the full forward's last columns") {
  std::mt19937_64 rng(47);
  auto model = small_model(15);
  torch::Tensor mask;
  auto tokens = ids_tensor({random_ids(rng, 9), random_ids(rng, 6)}, 9, true, &mask);
  auto pos = positions_from_mask(mask);
  auto km = mask.to(torch::kBool);
  torch::NoGradGuard ng;
  auto full = model->forward(tokens, pos, km);
  auto causal = model->forward(tokens, {});
  for (const int64_t from : {1, 4, 8}) {
    CAPTURE(from);
    auto part = model->forward(tokens, pos, km, nullptr, nullptr, nullptr, from);
    REQUIRE(part.sizes() == torch::IntArrayRef({2, 9 - from, 32}));
    CHECK(max_abs(part - full.narrow(1, from, 9 - from)) < 1e-5);
    auto part_causal = model->forward(tokens, {}, {}, nullptr, nullptr, nullptr, from);  // no mask: causal
    CHECK(max_abs(part_causal - causal.narrow(1, from, 9 - from)) < 1e-5);
  }
  PrefixKV kv;
  auto none = model->forward(tokens, pos, km, nullptr, nullptr, &kv, 9);  // keys and values only
  CHECK(none.size(1) == 0);
  PrefixKV kv_full;
  model->forward(tokens, pos, km, nullptr, nullptr, &kv_full);
  REQUIRE(kv.k.size() == kv_full.k.size());
  for (size_t i = 0; i < kv.k.size(); ++i) {
    CHECK(max_abs(kv.k[i] - kv_full.k[i]) < 1e-6);
    CHECK(max_abs(kv.v[i] - kv_full.v[i]) < 1e-6);
  }
  CHECK_THROWS(model->forward(tokens, pos, km, nullptr, nullptr, nullptr, 10));
}

TEST_CASE("update: samples with the same context fill mini-batches together, whatever the shuffle") {
  std::mt19937_64 rng(53);
  // One group's task prompt; two contexts (X, Y) that add 3 tokens to it, each the context of 4
  // samples with completions that differ from their first token. The 8 samples are one share
  // unit (the task prompt is most of each context). With mini-batches of 4, each batch should
  // hold one context's 4 samples: the context (23 tokens) runs once as the prefix, the rows run
  // only their 5 completion tokens. A mixed batch would share only the task prompt.
  const auto task = random_ids(rng, 20);
  std::vector<rl::TrainSample> samples;
  for (int c = 0; c < 2; ++c) {
    auto ctx = task;
    const auto extra = random_ids(rng, 3);
    ctx.insert(ctx.end(), extra.begin(), extra.end());
    for (int i = 0; i < 4; ++i) {
      rl::TrainSample s;
      s.prompt_ids = ctx;
      s.completion_ids = random_ids(rng, 5);
      s.completion_ids[0] = 4 * c + i;  // distinct first tokens
      s.advantage = i % 2 ? 0.5 : -0.5;
      s.segment_id = static_cast<int64_t>(samples.size());
      samples.push_back(s);
    }
  }
  for (uint64_t seed = 0; seed < 6; ++seed) {
    CAPTURE(seed);
    auto model = small_model(17);
    auto data = samples;
    rl::UpdateOptions o;
    o.mini_batch_size = 4;
    o.seed = seed;
    o.max_grad_norm = 0;
    rl::compute_old_logprobs(model, nullptr, data, o);
    std::vector<at::Tensor> params;
    for (auto& p : model->parameters()) params.push_back(p);
    torch::optim::SGD opt(params, torch::optim::SGDOptions(0.1));
    const auto st = rl::ppo_update(model, opt, params, data, o);
    CHECK(st.optimizer_steps == 2);
    CHECK(st.tokens_run == 2 * (23 + 4 * 5));
  }
}

TEST_CASE("transformer: a long masked forward on the CPU (query blocks) equals the float64 forward, gradients too") {
  std::mt19937_64 rng(59);
  auto model = small_model(19);
  auto model64 = small_model(19);
  model64->to(torch::kFloat64);
  torch::Tensor mask;
  auto tokens = ids_tensor({random_ids(rng, 520), random_ids(rng, 300)}, 520, true, &mask);  // 520 >= 2 blocks of 256
  auto pos = positions_from_mask(mask);
  auto km = mask.to(torch::kBool);
  const auto w = torch::randn({2, 520, 32}, torch::kFloat64) * mask.unsqueeze(-1).to(torch::kFloat64);
  for (const int64_t from : {0, 3}) {
    CAPTURE(from);
    auto h = model->forward(tokens, pos, km, nullptr, nullptr, nullptr, from);
    auto h64 = model64->forward(tokens, pos, km, nullptr, nullptr, nullptr, from);
    const auto wf = w.narrow(1, from, 520 - from);
    CHECK(max_abs((h.to(torch::kFloat64) - h64) * (wf != 0)) < 1e-4);
    (h.to(torch::kFloat64) * wf).sum().backward();
    (h64 * wf).sum().backward();
    auto p32 = model->parameters(), p64 = model64->parameters();
    double diff = 0, scale = 0;
    for (size_t i = 0; i < p32.size(); ++i) {
      REQUIRE(p32[i].grad().defined() == p64[i].grad().defined());
      if (!p32[i].grad().defined()) continue;  // the LM head: forward() stops at the hidden states
      diff = std::max(diff, max_abs(p32[i].grad().to(torch::kFloat64) - p64[i].grad()));
      scale = std::max(scale, max_abs(p64[i].grad()));
      p32[i].mutable_grad() = torch::Tensor();
      p64[i].mutable_grad() = torch::Tensor();
    }
    CAPTURE(diff);
    REQUIRE(scale > 1e-3);
    CHECK(diff < 1e-4 * scale);
  }
}
