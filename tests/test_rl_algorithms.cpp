// The pure RL algorithm functions (src/rl/): rewards, advantages, turn credit, DCP, loss
// aggregation and the clipped-surrogate loss. Every expected value is worked out by hand in
// the comments (DESIGN.md section 4).
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <vector>

#include "rl/advantage.hpp"
#include "rl/dcp.hpp"
#include "rl/loss.hpp"
#include "rl/reward.hpp"
#include "rl/update.hpp"
#include "util/error.hpp"

using namespace leap;
using namespace leap::rl;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// A rollout from its per-turn verdicts and speedups.
RolloutOutcome outcome(std::vector<bool> correct, std::vector<double> speedup = {}, int64_t tokens = 0) {
  RolloutOutcome r;
  r.turn_correct = std::move(correct);
  r.turn_speedup = std::move(speedup);
  r.completion_tokens = tokens;
  return r;
}

void check_values(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("index " << i);
    CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-9));
  }
}

double sum(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

}  // namespace

// ---- rewards ------------------------------------------------------------------------------

TEST_CASE("rl rollout outcome: first success and the speedup at it") {
  // The first success is turn 2: its speedup 1.5 counts, not the faster refinement at turn 3.
  RolloutOutcome r = outcome({false, true, true}, {kNaN, 1.5, 2.5});
  CHECK(r.first_success() == 2);
  CHECK(r.first_success_speedup() == 1.5);
  // A speedup on a wrong turn is ignored; a NaN at the first success is unknown (not the next one).
  r = outcome({false, true, true}, {9.0, kNaN, 1.2});
  CHECK(std::isnan(r.first_success_speedup()));
  r = outcome({false, false}, {kNaN, kNaN});
  CHECK_FALSE(r.first_success().has_value());
  CHECK(std::isnan(r.first_success_speedup()));
  // Missing speedups (timing off) count as NaN.
  r = outcome({true});
  CHECK(r.first_success() == 1);
  CHECK(std::isnan(r.first_success_speedup()));
}

TEST_CASE("rl rank reward: G=2, a success beats a failure") {
  // 1 win / 1 loss over G-1 = 1 other rollout.
  auto r = rank_rewards({outcome({true}, {1.0}), outcome({false, false, false})}, RankOptions{});
  check_values(r, {1.0, -1.0});
  // Both failed: a tie, whatever their tokens (failures are not compared on later keys).
  RankOptions tokens_only;
  tokens_only.keys = {"tokens"};
  r = rank_rewards({outcome({false}, {}, 10), outcome({false}, {}, 900)}, tokens_only);
  check_values(r, {0.0, 0.0});
}

TEST_CASE("rl rank reward: G=8 with ties on k and within the speedup margin") {
  // k = {1,1,2,inf,inf,3,2,1}; speedups of the first correct turn; margin 0.05.
  std::vector<RolloutOutcome> g = {
      outcome({true}, {2.0}),                           // 0: k=1, 2.0
      outcome({true}, {2.08}),                          // 1: k=1, 2.08
      outcome({false, true}, {kNaN, 1.5}),              // 2: k=2, 1.5
      outcome({false, false, false}, {kNaN, kNaN, kNaN}),  // 3: never
      outcome({false, false, false}),                   // 4: never
      outcome({false, false, true}, {kNaN, kNaN, 0.9}), // 5: k=3, 0.9
      outcome({false, true}, {kNaN, 1.6}),              // 6: k=2, 1.6
      outcome({true}, {1.0}),                           // 7: k=1, 1.0
  };
  // 0 vs 1: |2.08-2.0| = 0.08 <= 0.05*2.08 = 0.104 -> tie.
  // 0 vs 7, 1 vs 7: |2-1| = 1 > 0.1 -> 0 and 1 win.
  // 6 vs 2: |1.6-1.5| = 0.1 > 0.05*1.6 = 0.08 -> 6 wins.
  // 0: beats 7 and the 5 with larger k, ties 1        -> (6-0)/7
  // 1: same                                           -> (6-0)/7
  // 7: loses to 0,1; beats 2,6,5,3,4                  -> (5-2)/7
  // 2: loses to 0,1,7,6; beats 5,3,4                  -> (3-4)/7
  // 6: loses to 0,1,7; beats 2,5,3,4                  -> (4-3)/7
  // 5: loses to 0,1,7,2,6; beats 3,4                  -> (2-5)/7
  // 3, 4: lose to the 6 successes, tie each other     -> (0-6)/7
  auto r = rank_rewards(g, RankOptions{});
  check_values(r, {6.0 / 7, 6.0 / 7, -1.0 / 7, -6.0 / 7, -6.0 / 7, -3.0 / 7, 1.0 / 7, 3.0 / 7});
  CHECK(sum(r) == doctest::Approx(0.0));
  // Without later keys, 0/1/7 all tie: 0,1,7 -> (5-0)/7 each; 2 and 6 tie: 3 wins, 3 losses -> 0.
  RankOptions no_keys;
  no_keys.keys = {};
  r = rank_rewards(g, no_keys);
  check_values(r, {5.0 / 7, 5.0 / 7, 0.0, -6.0 / 7, -6.0 / 7, -3.0 / 7, 0.0, 5.0 / 7});
  CHECK(sum(r) == doctest::Approx(0.0));
}

TEST_CASE("rl rank reward: all-equal group, NaN speedup, G=1") {
  std::vector<RolloutOutcome> same(4, outcome({false, true}, {kNaN, 1.0}));
  check_values(rank_rewards(same, RankOptions{}), {0.0, 0.0, 0.0, 0.0});
  CHECK(all_zero(rank_rewards(same, RankOptions{})));
  std::vector<RolloutOutcome> failed(3, outcome({false, false}));
  check_values(rank_rewards(failed, RankOptions{}), {0.0, 0.0, 0.0});
  // Both succeeded at turn 1 but one was not timed: the speedup key cannot decide -> tie.
  check_values(rank_rewards({outcome({true}, {1.5}), outcome({true}, {kNaN})}, RankOptions{}), {0.0, 0.0});
  check_values(rank_rewards({outcome({true}, {3.0})}, RankOptions{}), {0.0});
  CHECK(rank_rewards({}, RankOptions{}).empty());
}

TEST_CASE("rl rank reward: tokens key and key order") {
  // All k=1. Speedups 1.0, 1.02, 1.0: |0.02| <= 0.05*1.02 = 0.051 -> every pair ties on speedup.
  // Tokens 100, 110, 200 with margin 16: 0~1 tie (10), 0 beats 2 (100), 1 beats 2 (90).
  std::vector<RolloutOutcome> g = {outcome({true}, {1.0}, 100), outcome({true}, {1.02}, 110),
                                   outcome({true}, {1.0}, 200)};
  RankOptions opts;
  opts.keys = {"speedup", "tokens"};
  check_values(rank_rewards(g, opts), {0.5, 0.5, -1.0});  // (1-0)/2, (1-0)/2, (0-2)/2
  // Margin 0: 0 beats 1 too -> (2-0)/2, (1-1)/2, (0-2)/2.
  opts.tokens_tie_margin = 0;
  check_values(rank_rewards(g, opts), {1.0, 0.0, -1.0});
  // Speedup decides first when it is not a tie: 4.0 beats the others whatever its tokens.
  g[2].turn_speedup = {4.0};
  check_values(rank_rewards(g, opts), {0.0, -1.0, 1.0});  // 0: beats 1, loses to 2
}

TEST_CASE("rl rank reward: unknown key throws") {
  RankOptions opts;
  opts.keys = {"speedup", "latency"};
  CHECK_THROWS_AS(rank_rewards({outcome({true}), outcome({false})}, opts), Error);
  CHECK_THROWS_AS(rank_rewards({outcome({true})}, opts), Error);
}

TEST_CASE("rl binary reward: last turn decides") {
  CHECK(binary_reward(outcome({false, true})) == 1.0);
  CHECK(binary_reward(outcome({true})) == 1.0);
  CHECK(binary_reward(outcome({true, false})) == 0.0);  // refined after success, ended wrong
  CHECK(binary_reward(outcome({false, false, false})) == 0.0);
  CHECK(binary_reward(outcome({})) == 0.0);
}

TEST_CASE("rl speedup and kernelgym per-turn rewards") {
  RolloutOutcome r = outcome({false, true, true}, {kNaN, 1.5, 4.0});
  // speedup: 0; 0.3 + 1.5 = 1.8; 0.3 + 4.0 = 4.3
  check_values(speedup_turn_rewards(r), {0.0, 1.8, 4.3});
  // kernelgym cap 3: 0; 1 + 1.5 = 2.5; 1 + min(4, 3) = 4
  check_values(kernelgym_turn_rewards(r), {0.0, 2.5, 4.0});
  // cap 2: third turn 1 + 2 = 3
  check_values(kernelgym_turn_rewards(r, 2.0), {0.0, 2.5, 3.0});
  // A correct turn without a timing gets the correctness term only; a wrong turn's speedup is ignored.
  RolloutOutcome untimed = outcome({true, false}, {kNaN, 2.0});
  check_values(speedup_turn_rewards(untimed), {0.3, 0.0});
  check_values(kernelgym_turn_rewards(untimed), {1.0, 0.0});
  check_values(speedup_turn_rewards(outcome({false, true})), {0.0, 0.3});  // speedups left empty
  CHECK_THROWS_AS(speedup_turn_rewards(outcome({true}, {1.0, 2.0})), Error);
  CHECK_THROWS_AS(kernelgym_turn_rewards(outcome({true}, {1.0, 2.0})), Error);
}

TEST_CASE("rl discounted returns with gamma 0.4") {
  // G3 = 4.3; G2 = 1.8 + 0.4*4.3 = 3.52; G1 = 0 + 0.4*3.52 = 1.408
  check_values(discounted_returns({0.0, 1.8, 4.3}, 0.4), {1.408, 3.52, 4.3});
  check_values(discounted_returns({1.0}, 0.4), {1.0});
  CHECK(discounted_returns({}, 0.4).empty());
}

// ---- advantages ---------------------------------------------------------------------------

TEST_CASE("rl advantage kinds parse") {
  CHECK(parse_advantage_kind("grpo") == AdvantageKind::grpo);
  CHECK(parse_advantage_kind("dr_grpo") == AdvantageKind::dr_grpo);
  CHECK(parse_advantage_kind("rloo") == AdvantageKind::rloo);
  CHECK_THROWS_WITH_AS(parse_advantage_kind("ppo"), doctest::Contains("dr_grpo"), Error);
}

TEST_CASE("rl group advantages: grpo (unbiased std), dr_grpo, rloo") {
  // s = {2,4,4,4,5,5,7,9}: mean 40/8 = 5; squared deviations 9+1+1+1+0+0+4+16 = 32;
  // unbiased variance 32/7, std sqrt(32/7) = 2.138089935 (the population std would be 2).
  std::vector<double> s = {2, 4, 4, 4, 5, 5, 7, 9};
  const double sd = std::sqrt(32.0 / 7.0);
  std::vector<double> want, want_eps;
  for (double x : s) want.push_back((x - 5.0) / sd), want_eps.push_back((x - 5.0) / (sd + 2.0));
  check_values(group_advantages(s, AdvantageKind::grpo, 0.0), want);  // {-1.403, -0.468, ..., 1.871}
  check_values(group_advantages(s, AdvantageKind::grpo, 2.0), want_eps);
  check_values(group_advantages(s, AdvantageKind::dr_grpo, 1e-6), {-3, -1, -1, -1, 0, 0, 2, 4});
  // rloo on {1,2,6}: 1 - (2+6)/2 = -3; 2 - (1+6)/2 = -1.5; 6 - (1+2)/2 = 4.5
  check_values(group_advantages({1, 2, 6}, AdvantageKind::rloo, 1e-6), {-3, -1.5, 4.5});
  for (auto kind : {AdvantageKind::grpo, AdvantageKind::dr_grpo, AdvantageKind::rloo}) {
    check_values(group_advantages({0.7}, kind, 1e-6), {0.0});
    CHECK(group_advantages({}, kind, 1e-6).empty());
    CHECK(all_zero(group_advantages({3, 3, 3}, kind, 1e-6)));
  }
}

TEST_CASE("rl turn advantages: per-turn returns minus the rollout-score baseline") {
  // Scores s = G_{i,1} = {1, 3, 2}: mean 2; unbiased variance (1+1+0)/2 = 1, std 1; with the
  // scores {1, 3, 5} of the second case: variance (4+0+4)/2 = 4, std 2.
  std::vector<std::vector<double>> ret = {{1.0, 2.0}, {3.0}, {2.0, 0.5, 5.0}};
  auto dr = turn_advantages(ret, AdvantageKind::dr_grpo, 1e-6);
  REQUIRE(dr.size() == 3);
  check_values(dr[0], {-1.0, 0.0});
  check_values(dr[1], {1.0});
  check_values(dr[2], {0.0, -1.5, 3.0});
  auto grpo = turn_advantages(ret, AdvantageKind::grpo, 0.0);
  check_values(grpo[0], {-1.0, 0.0});
  check_values(grpo[1], {1.0});
  check_values(grpo[2], {0.0, -1.5, 3.0});
  auto grpo2 = turn_advantages({{1.0, 2.0}, {3.0}, {5.0, 9.0}}, AdvantageKind::grpo, 0.0);  // mean 3, std 2
  check_values(grpo2[0], {-1.0, -0.5});
  check_values(grpo2[1], {0.0});
  check_values(grpo2[2], {1.0, 3.0});
  // rloo baselines: b0 = (3+2)/2 = 2.5, b1 = (1+2)/2 = 1.5, b2 = (1+3)/2 = 2.
  auto rloo = turn_advantages(ret, AdvantageKind::rloo, 1e-6);
  check_values(rloo[0], {-1.5, -0.5});
  check_values(rloo[1], {1.5});
  check_values(rloo[2], {0.0, -1.5, 3.0});
  // A single rollout has no baseline: zeros of the same shape.
  auto one = turn_advantages({{1.0, 2.0}}, AdvantageKind::grpo, 1e-6);
  REQUIRE(one.size() == 1);
  check_values(one[0], {0.0, 0.0});
  CHECK_THROWS_AS(turn_advantages({{1.0}, {}}, AdvantageKind::grpo, 1e-6), Error);
  // Equal scores s = {1, 1} (std 0): grpo leaves G_{i,t} - mean unscaled instead of dividing by
  // std_eps: {1 - 1, 2 - 1} = {0, 1} and {1 - 1, 0 - 1} = {0, -1}.
  auto flat = turn_advantages({{1.0, 2.0}, {1.0, 0.0}}, AdvantageKind::grpo, 1e-6);
  check_values(flat[0], {0.0, 1.0});
  check_values(flat[1], {0.0, -1.0});
}

TEST_CASE("rl all_zero") {
  CHECK(all_zero({0.0, 1e-13, -1e-13}));
  CHECK(all_zero({}));
  CHECK_FALSE(all_zero({0.0, 1e-6}));
  CHECK_FALSE(all_zero({kNaN}));
}

TEST_CASE("rl turn credit") {
  // A = 0.5, k = 3 of 3, gamma 0.4: {0.4^2 * 0.5, 0.4 * 0.5, 0.5} = {0.08, 0.2, 0.5}
  check_values(turn_credit(0.5, 3, 3, 0.4), {0.08, 0.2, 0.5});
  // Refinement turns after the first success get A: k = 2 of 3 -> {0.2, 0.5, 0.5}; k = 1 -> all A.
  check_values(turn_credit(0.5, 2, 3, 0.4), {0.2, 0.5, 0.5});
  check_values(turn_credit(0.5, 1, 3, 0.4), {0.5, 0.5, 0.5});
  // Negative or zero A reaches every turn undiscounted.
  check_values(turn_credit(-0.5, 2, 3, 0.4), {-0.5, -0.5, -0.5});
  check_values(turn_credit(0.0, 3, 3, 0.4), {0.0, 0.0, 0.0});
  // No success: every turn gets A.
  check_values(turn_credit(-0.25, std::nullopt, 2, 0.4), {-0.25, -0.25});
  check_values(turn_credit(0.25, std::nullopt, 2, 0.4), {0.25, 0.25});
  CHECK(turn_credit(0.5, std::nullopt, 0, 0.4).empty());
  CHECK_THROWS_AS(turn_credit(0.5, 4, 3, 0.4), Error);
  CHECK_THROWS_AS(turn_credit(0.5, 0, 3, 0.4), Error);
  CHECK_THROWS_AS(turn_credit(0.5, std::nullopt, -1, 0.4), Error);
}

// ---- DCP ----------------------------------------------------------------------------------

TEST_CASE("rl dcp at the thresholds") {
  DcpOptions on;  // 0.5 .. 0.875
  CHECK_FALSE(dcp_decide(3, 8, on).expand);  // 0.375 < 0.5: too simple
  CHECK(dcp_decide(3, 8, on).fail_ratio == 0.375);
  CHECK(dcp_decide(4, 8, on).expand);        // 0.5: lower bound inclusive
  CHECK(dcp_decide(7, 8, on).expand);        // 0.875: upper bound inclusive
  CHECK(dcp_decide(7, 8, on).fail_ratio == 0.875);
  CHECK_FALSE(dcp_decide(8, 8, on).expand);  // 1.0: all failed, cut
  CHECK_FALSE(dcp_decide(0, 8, on).expand);
  // Tolerance: 0.1 + 0.2 = 0.30000000000000004 as a bound still admits 3/10.
  DcpOptions tight;
  tight.min_fail_ratio = 0.1 + 0.2;
  CHECK(dcp_decide(3, 10, tight).expand);
  DcpOptions off;
  off.enabled = false;
  CHECK(dcp_decide(8, 8, off).expand);
  CHECK(dcp_decide(1, 8, off).expand);
  CHECK_FALSE(dcp_decide(0, 8, off).expand);
  CHECK(dcp_decide(1, 8, off).fail_ratio == 0.125);
}

TEST_CASE("rl dcp rejects bad input") {
  CHECK_THROWS_AS(dcp_decide(9, 8, DcpOptions{}), Error);
  CHECK_THROWS_AS(dcp_decide(-1, 8, DcpOptions{}), Error);
  CHECK_THROWS_AS(dcp_decide(0, 0, DcpOptions{}), Error);
}

// ---- aggregation --------------------------------------------------------------------------

TEST_CASE("rl aggregation weights") {
  CHECK(parse_aggregation("token_mean") == Aggregation::token_mean);
  CHECK(parse_aggregation("seq_mean_token_mean") == Aggregation::seq_mean_token_mean);
  CHECK(parse_aggregation("constant_length") == Aggregation::constant_length);
  CHECK(parse_aggregation("segment_mean") == Aggregation::segment_mean);
  CHECK_THROWS_WITH_AS(parse_aggregation("sum"), doctest::Contains("segment_mean"), Error);

  // Tokens {2,3,0,4,1}; sample 2 is empty (weight 0, not counted): T = 10, N = 4.
  const std::vector<int64_t> n = {2, 3, 0, 4, 1};
  const std::vector<int64_t> seg = {10, 10, 11, 20, 30};
  check_values(aggregation_weights(Aggregation::token_mean, n, {}, 8), {0.1, 0.1, 0, 0.1, 0.1});
  // 1/(n_i * 4): 1/8, 1/12, 0, 1/16, 1/4
  check_values(aggregation_weights(Aggregation::seq_mean_token_mean, n, seg, 8),
               {1.0 / 8, 1.0 / 12, 0, 1.0 / 16, 1.0 / 4});
  // 1/(4 * 8) = 1/32
  check_values(aggregation_weights(Aggregation::constant_length, n, {}, 8),
               {1.0 / 32, 1.0 / 32, 0, 1.0 / 32, 1.0 / 32});
  // Segments: 10 -> 2+3 = 5 tokens, 11 -> 0 (not counted), 20 -> 4, 30 -> 1: 3 segments.
  // w = 1/(5*3), 1/(5*3), 0, 1/(4*3), 1/(1*3); a loss of 1 per token gives
  // 2/15 + 3/15 + 4/12 + 1/3 = 1 (each segment's token mean is 1, their mean is 1).
  check_values(aggregation_weights(Aggregation::segment_mean, n, seg, 8),
               {1.0 / 15, 1.0 / 15, 0, 1.0 / 12, 1.0 / 3});

  for (auto kind : {Aggregation::token_mean, Aggregation::seq_mean_token_mean,
                    Aggregation::constant_length, Aggregation::segment_mean})
    check_values(aggregation_weights(kind, {0, 0}, {1, 2}, 8), {0.0, 0.0});
  CHECK_THROWS_AS(aggregation_weights(Aggregation::segment_mean, n, {}, 8), Error);
  CHECK_THROWS_AS(aggregation_weights(Aggregation::token_mean, n, {1, 2}, 8), Error);
  CHECK_THROWS_AS(aggregation_weights(Aggregation::token_mean, {2, -1}, {}, 8), Error);
  CHECK_THROWS_AS(aggregation_weights(Aggregation::constant_length, n, {}, 0), Error);
}

namespace {

TrainSample sample(int64_t segment, int64_t tokens) {
  TrainSample s;
  s.segment_id = segment;
  s.completion_ids.assign(static_cast<size_t>(tokens), 7);
  return s;
}

}  // namespace

TEST_CASE("rl segment_mean: one segment split across optimizer steps and ranks counts once per RL step") {
  // Rank 0 holds two turns of segment 10 (4 and 6 tokens), segment 20 (5) and an empty sample
  // of segment 30; rank 1 holds the third turn of segment 10 (10 tokens) and segment 40 (2).
  std::vector<TrainSample> rank0 = {sample(10, 4), sample(10, 6), sample(20, 5), sample(30, 0)};
  std::vector<TrainSample> rank1 = {sample(10, 10), sample(40, 2)};
  // The step's totals: segment 10 = 4 + 6 + 10 = 20 tokens, 20 = 5, 40 = 2; segment 30 has no
  // tokens and is not counted: S = 3 segments.
  std::map<int64_t, int64_t> step;
  for (const auto* part : {&rank0, &rank1})
    for (const auto& [id, n] : segment_tokens(*part)) step[id] += n;
  CHECK(step == std::map<int64_t, int64_t>{{10, 20}, {20, 5}, {40, 2}});
  set_segment_weights(rank0, step);
  set_segment_weights(rank1, step);
  // w = 1 / (T_s * S): segment 10: 1/60 on both ranks; 20: 1/15; 40: 1/6; the empty sample 0.
  check_values({rank0[0].weight, rank0[1].weight, rank0[2].weight, rank0[3].weight}, {1.0 / 60, 1.0 / 60, 1.0 / 15, 0});
  check_values({rank1[0].weight, rank1[1].weight}, {1.0 / 60, 1.0 / 6});
  // Each segment's weighted tokens: 20/60 = 5/15 = 2/6 = 1/3: the mean over segments of their
  // token means, whatever rank and optimizer step their turns are in.

  // Rank 0's optimizer steps of mini_batch 1 x grad_accum 2: {0, 1} and {2, 3}, 2 steps per
  // epoch. Each step's weights are the fixed ones times 2, so the epoch's two steps add up to 2x
  // one segment mean (each step keeps the scale of a mean).
  UpdateOptions o;
  o.aggregation = Aggregation::segment_mean;
  check_values(step_weights(rank0, {0, 1}, o, 2), {2.0 / 60, 2.0 / 60});
  check_values(step_weights(rank0, {2, 3}, o, 2), {2.0 / 15, 0});
  // The per-chunk rule it replaces would count segment 10 again in every chunk: over chunk {0, 1}
  // alone segment 10 has 10 tokens and is the only segment, w = 1/10 (a long segment gains weight).
  check_values(aggregation_weights(Aggregation::segment_mean, {4, 6}, {10, 10}, 8), {0.1, 0.1});
  // Weights not set: the update refuses instead of guessing.
  std::vector<TrainSample> unset = {sample(1, 3)};
  CHECK_THROWS_WITH_AS(step_weights(unset, {0}, o, 1), doctest::Contains("set_step_segment_weights"), Error);
  // Other aggregations keep their per-optimizer-step normalizers: token_mean over {0, 1} = 1/10.
  o.aggregation = Aggregation::token_mean;
  check_values(step_weights(rank0, {0, 1}, o, 2), {0.1, 0.1});
  // A segment missing from the step's totals is an error, not a silent weight.
  std::vector<TrainSample> stray = {sample(99, 1)};
  CHECK_THROWS_AS(set_segment_weights(stray, step), Error);
}

// ---- policy loss --------------------------------------------------------------------------

namespace {

/// The [2,3] example: ratios r = exp(logp - old) and advantages A = {+1, -2}.
struct LossCase {
  torch::Tensor logp, old_logp, advantages, mask, weights;
  LossCase() {
    // sample 0 (A=+1):  r = 1.5 (above 1.28: upper clip), 0.5 (A>0, unclipped), 1.1 (inside)
    // sample 1 (A=-2):  r = 0.5 (below 0.8: lower clip), 1.5 (A<0, unclipped), 1.0 (masked out)
    logp = torch::tensor({-1.0, -2.0, -0.5, -1.5, -0.7, -3.0}, torch::kFloat32).reshape({2, 3});
    torch::Tensor log_r = torch::tensor({std::log(1.5), std::log(0.5), std::log(1.1), std::log(0.5),
                                         std::log(1.5), 0.0}, torch::kFloat32).reshape({2, 3});
    old_logp = logp - log_r;
    logp.requires_grad_(true);
    advantages = torch::tensor({1.0, -2.0}, torch::kFloat32);
    mask = torch::tensor({true, true, true, true, true, false}).reshape({2, 3});
    // seq_mean_token_mean over n = {3, 2}: w = 1/(3*2), 1/(2*2)
    weights = torch::tensor({1.0 / 6, 1.0 / 4}, torch::kFloat64);
  }
};

}  // namespace

TEST_CASE("rl policy loss: clipping, diagnostics and gradient by hand") {
  LossCase c;
  LossOptions opts;  // eps 0.2 / 0.28, beta 0
  LossTerms t = policy_loss(c.logp, c.old_logp, torch::Tensor(), c.advantages, c.mask, c.weights, opts);
  // pg = -min(r*A, clamp(r, 0.8, 1.28)*A):
  //  sample 0: -min(1.5, 1.28) = -1.28; -min(0.5, 0.8) = -0.5; -min(1.1, 1.1) = -1.1 -> sum -2.88
  //  sample 1: -min(-1, -1.6) = 1.6;  -min(-3, -2.56) = 3                          -> sum  4.6
  // loss = -2.88/6 + 4.6/4 = -0.48 + 1.15 = 0.67
  CHECK(t.loss.dim() == 0);
  CHECK(t.loss.item<double>() == doctest::Approx(0.67).epsilon(1e-6));
  CHECK(t.clip_frac_high == doctest::Approx(0.2));  // 1 of 5 masked tokens
  CHECK(t.clip_frac_low == doctest::Approx(0.2));   // 1 of 5
  CHECK(t.ratio_mean == doctest::Approx(1.02).epsilon(1e-6));  // (1.5+0.5+1.1+0.5+1.5)/5 = 5.1/5
  CHECK(t.kl_mean == 0.0);

  t.loss.backward();
  torch::Tensor g = c.logp.grad();
  // Unclipped tokens: d(-r*A*w)/dlogp = -r*A*w.
  CHECK(g[0][1].item<double>() == doctest::Approx(-0.5 * 1.0 / 6).epsilon(1e-6));   // -1/12
  CHECK(g[0][2].item<double>() == doctest::Approx(-1.1 * 1.0 / 6).epsilon(1e-6));   // -0.18333
  CHECK(g[1][1].item<double>() == doctest::Approx(-1.5 * -2.0 / 4).epsilon(1e-6));  // 0.75
  // Clipped tokens and the masked token: 0.
  CHECK(g[0][0].item<double>() == 0.0);
  CHECK(g[1][0].item<double>() == 0.0);
  CHECK(g[1][2].item<double>() == 0.0);
}

TEST_CASE("rl policy loss: k3 KL with beta") {
  LossCase c;
  // ref - logp = d: sample 0 {ln 2, 0, ln 0.5}, sample 1 {0, ln 2, ln 2 (masked)}.
  // k3 = e^d - d - 1: ln 2 -> 2 - ln2 - 1 = 1 - ln2 = 0.306853; 0 -> 0; ln 0.5 -> ln2 - 0.5 = 0.193147.
  torch::Tensor d = torch::tensor({std::log(2.0), 0.0, std::log(0.5), 0.0, std::log(2.0), std::log(2.0)},
                                  torch::kFloat32).reshape({2, 3});
  torch::Tensor ref = c.logp.detach() + d;
  LossOptions opts;
  opts.kl_beta = 0.1;
  LossTerms t = policy_loss(c.logp, c.old_logp, ref, c.advantages, c.mask, c.weights, opts);
  // Masked kl: (1-ln2) + 0 + (ln2-0.5) + 0 + (1-ln2) = 1.5 - ln2; mean over 5 = 0.161371
  const double ln2 = std::log(2.0);
  CHECK(t.kl_mean == doctest::Approx((1.5 - ln2) / 5).epsilon(1e-6));
  // loss = 0.67 + 0.1 * (0.5/6 + (1-ln2)/4) = 0.67 + 0.1 * (0.083333 + 0.076713) = 0.686005
  CHECK(t.loss.item<double>() == doctest::Approx(0.67 + 0.1 * (0.5 / 6 + (1 - ln2) / 4)).epsilon(1e-6));
  t.loss.backward();
  torch::Tensor g = c.logp.grad();
  // d k3/d logp = 1 - e^d. Token [0][1] has d = 0: only the pg gradient -1/12.
  CHECK(g[0][1].item<double>() == doctest::Approx(-1.0 / 12).epsilon(1e-6));
  // Token [0][0]: pg clipped (0) + w*beta*(1 - 2) = -0.1/6 = -1/60.
  CHECK(g[0][0].item<double>() == doctest::Approx(-1.0 / 60).epsilon(1e-6));
  // Token [1][1]: 0.75 + (1/4)*0.1*(1 - 2) = 0.725.
  CHECK(g[1][1].item<double>() == doctest::Approx(0.725).epsilon(1e-6));

  // A reference with beta 0 reports the KL but leaves the loss alone.
  LossCase c2;
  LossTerms t0 = policy_loss(c2.logp, c2.old_logp, c2.logp.detach() + d, c2.advantages, c2.mask,
                             c2.weights, LossOptions{});
  CHECK(t0.kl_mean == doctest::Approx((1.5 - ln2) / 5).epsilon(1e-6));
  CHECK(t0.loss.item<double>() == doctest::Approx(0.67).epsilon(1e-6));
}

TEST_CASE("rl policy loss: splitting the batch sums to the whole, padding is inert") {
  LossCase c;
  // Same weights, one sample at a time: -0.48 and 1.15 (see the clipping test).
  auto part = [&](int64_t i) {
    using torch::indexing::Slice;
    return policy_loss(c.logp.index({Slice(i, i + 1)}), c.old_logp.index({Slice(i, i + 1)}), torch::Tensor(),
                       c.advantages.index({Slice(i, i + 1)}), c.mask.index({Slice(i, i + 1)}),
                       c.weights.index({Slice(i, i + 1)}), LossOptions{})
        .loss.item<double>();
  };
  CHECK(part(0) == doctest::Approx(-0.48).epsilon(1e-6));
  CHECK(part(1) == doctest::Approx(1.15).epsilon(1e-6));

  // inf / NaN at the masked position reach neither the loss nor the gradient; a float mask works too.
  LossCase p;
  torch::Tensor old = p.old_logp.clone();
  old.index_put_({1, 2}, -std::numeric_limits<float>::infinity());
  torch::Tensor ref = p.logp.detach().clone();
  ref.index_put_({1, 2}, std::numeric_limits<float>::quiet_NaN());
  LossOptions opts;
  opts.kl_beta = 0.1;  // ref == logp elsewhere: k3 = 0
  LossTerms t = policy_loss(p.logp, old, ref, p.advantages, p.mask.to(torch::kFloat32), p.weights, opts);
  CHECK(t.loss.item<double>() == doctest::Approx(0.67).epsilon(1e-6));
  CHECK(t.kl_mean == doctest::Approx(0.0));
  t.loss.backward();
  CHECK(torch::isfinite(p.logp.grad()).all().item<bool>());
  CHECK(p.logp.grad()[1][2].item<double>() == 0.0);
}

TEST_CASE("rl policy loss: shape mismatches throw") {
  LossCase c;
  const torch::Tensor none;
  const LossOptions o;
  CHECK_THROWS_AS(policy_loss(c.logp, c.old_logp.index({torch::indexing::Slice(), torch::indexing::Slice(0, 2)}),
                              none, c.advantages, c.mask, c.weights, o),
                  Error);
  CHECK_THROWS_AS(policy_loss(c.logp, c.old_logp, torch::zeros({2, 2}), c.advantages, c.mask, c.weights, o), Error);
  CHECK_THROWS_AS(policy_loss(c.logp, c.old_logp, none, torch::zeros({3}), c.mask, c.weights, o), Error);
  CHECK_THROWS_AS(policy_loss(c.logp, c.old_logp, none, c.advantages, c.mask.reshape({3, 2}), c.weights, o), Error);
  CHECK_THROWS_AS(policy_loss(c.logp, c.old_logp, none, c.advantages, c.mask, torch::ones({2, 1}), o), Error);
  CHECK_THROWS_AS(policy_loss(c.logp.flatten(), c.old_logp.flatten(), none, c.advantages, c.mask, c.weights, o),
                  Error);
}

TEST_CASE("rl update: grad_norm is sqrt of the sum of squared gradients (fp64 reference), skipping tensors without one") {
  torch::manual_seed(5);
  std::vector<at::Tensor> params;
  double sq = 0;
  for (int64_t n : {3, 1000, 77}) {
    auto p = torch::randn({n}, torch::kFloat32).requires_grad_(true);
    p.mutable_grad() = torch::randn({n}, torch::kFloat32) * static_cast<double>(n);
    sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
    params.push_back(p);
  }
  params.push_back(torch::randn({4, 4}).requires_grad_(true));  // no gradient: skipped
  CHECK(leap::rl::grad_norm(params) == doctest::Approx(std::sqrt(sq)).epsilon(1e-6));
  CHECK(leap::rl::grad_norm({}) == 0.0);
  params[1].mutable_grad()[7] = std::numeric_limits<float>::infinity();
  CHECK(std::isinf(leap::rl::grad_norm(params)));
  params[1].mutable_grad()[7] = std::numeric_limits<float>::quiet_NaN();
  CHECK(std::isnan(leap::rl::grad_norm(params)));
}
