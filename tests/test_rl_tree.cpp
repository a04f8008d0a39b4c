// Debugging-tree rewards (Murphy) and staged advantages (Tree-OPO) against hand-computed trees,
// the flat estimators where every sample shares one prefix, and the projection's optimality.
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "config/experiment.hpp"
#include "config/load.hpp"
#include "rl/advantage.hpp"
#include "rl/scoring.hpp"
#include "rl/tree_advantage.hpp"
#include "util/error.hpp"

using namespace leap;
using rl::TreeNode;

TEST_SUITE_BEGIN("rl");

namespace {

/// Two turn-1 answers: 0 failed, 1 passed. Node 0's children: 2 failed, 3 passed; node 2's
/// child 4 passed. Own rewards binary.
std::vector<TreeNode> hand_tree() {
  return {{-1, 0.0, false}, {-1, 1.0, true}, {0, 0.0, false}, {0, 1.0, true}, {2, 1.0, true}};
}

void check_all(const std::vector<double>& got, const std::vector<double>& want, double eps = 1e-9) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) CHECK_MESSAGE(got[i] == doctest::Approx(want[i]).epsilon(eps), "index " << i);
}

}  // namespace

TEST_CASE("rl tree: MaRS and MeRS propagate subtree rewards, discounted per level") {
  const auto nodes = hand_tree();
  // max, gamma 0.5: node 2 = max(0, 0.5 * 1) = 0.5; node 0 = max(0, 0.5 * max(0.5, 1)) = 0.5.
  check_all(rl::propagate_tree_rewards(nodes, rl::TreeReward::max, 0.5), {0.5, 1, 0.5, 1, 1});
  // mean, gamma 0.5: node 2 = 0.5 * 1; node 0 = 0.5 * mean(0.5, 1) = 0.375.
  check_all(rl::propagate_tree_rewards(nodes, rl::TreeReward::mean, 0.5), {0.375, 1, 0.5, 1, 1});
  check_all(rl::propagate_tree_rewards(nodes, rl::TreeReward::none, 0.5), {0, 1, 0, 1, 1});
  // A node never earns less than its own answer (a correct parent refined into failures).
  const std::vector<TreeNode> refined = {{-1, 1.0, true}, {0, 0.0, false}, {0, 0.0, false}};
  check_all(rl::propagate_tree_rewards(refined, rl::TreeReward::mean, 1.0), {1, 0, 0});
  CHECK_THROWS_AS(rl::propagate_tree_rewards({{1, 0, false}, {-1, 0, false}}, rl::TreeReward::max, 1), Error);
  CHECK_THROWS_AS(rl::parse_tree_reward("sum"), Error);
}

TEST_CASE("rl tree: prefix values V(p) over the rewards below each prefix") {
  const auto nodes = hand_tree();
  // Roots share the task prompt: all 5 nodes (own rewards 0 1 0 1 1). Children of 0: nodes 2, 3,
  // 4 (0 1 1). Child of 2: node 4 (1).
  check_all(rl::prefix_values(nodes, rl::SaeValue::expectation), {0.6, 0.6, 2.0 / 3, 2.0 / 3, 1.0});
  check_all(rl::prefix_values(nodes, rl::SaeValue::optimistic), {1, 1, 1, 1, 1});
  check_all(rl::prefix_values(nodes, rl::SaeValue::pessimistic), {0, 0, 0, 0, 1});
  CHECK_THROWS_AS(rl::parse_sae_value("mean"), Error);
}

TEST_CASE("rl tree: SAE subtracts alpha V(prefix) and centres over the group") {
  const auto nodes = hand_tree();
  const std::vector<double> r = {0, 1, 0, 1, 1};
  // a' = r - 0.5 V = -0.3, 0.7, -1/3, 2/3, 0.5; mean 0.74 / 3.
  const double m = (-0.3 + 0.7 - 1.0 / 3 + 2.0 / 3 + 0.5) / 5;
  check_all(rl::sae_advantages(nodes, r, 0.5, rl::SaeValue::expectation),
            {-0.3 - m, 0.7 - m, -1.0 / 3 - m, 2.0 / 3 - m, 0.5 - m});
  CHECK_THROWS_AS(rl::sae_advantages(nodes, {1, 2}, 0.5, rl::SaeValue::expectation), Error);
  CHECK(rl::sae_advantages({}, {}, 0.5, rl::SaeValue::expectation).empty());
}

TEST_CASE("rl tree: with one shared prefix (or alpha 0) SAE is the flat dr_grpo estimator") {
  const std::vector<double> r = {0.3, 1.3, 0.0, 2.5, 0.3, 1.0};
  std::vector<TreeNode> flat;
  for (double x : r) flat.push_back({-1, x, x > 0.5});
  const auto dr = rl::group_advantages(r, rl::AdvantageKind::dr_grpo, 1e-6);
  for (auto v : {rl::SaeValue::expectation, rl::SaeValue::optimistic, rl::SaeValue::pessimistic})
    check_all(rl::sae_advantages(flat, r, 0.5, v), dr);
  // A real tree with alpha 0: the baseline is the group mean alone.
  const auto nodes = hand_tree();
  const std::vector<double> t = {0, 1, 0, 1, 1};
  check_all(rl::sae_advantages(nodes, t, 0.0, rl::SaeValue::expectation),
            rl::group_advantages(t, rl::AdvantageKind::dr_grpo, 1e-6));
}

TEST_CASE("rl tree: soft SAE order constraints put a correct node above its failed parent") {
  const auto order = rl::sae_order_constraints(hand_tree());
  // Node 3 (passed) above its failed parent 0; node 4 (passed) above its failed parent 2.
  REQUIRE(order.size() == 2);
  CHECK(order[0] == std::pair<int, int>{3, 0});
  CHECK(order[1] == std::pair<int, int>{4, 2});
  const auto refined = rl::sae_order_constraints({{-1, 1.0, true}, {0, 0.0, false}});
  REQUIRE(refined.size() == 1);
  CHECK(refined[0] == std::pair<int, int>{0, 1});
}

TEST_CASE("rl tree: the soft SAE projection against hand-solved QPs") {
  // The order constraint alone: (1, -1) with a1 >= a0 meets the line a0 = -a1 at 0.
  check_all(rl::project_sae({1, -1}, {{1, 0}}, 2), {0, 0}, 1e-6);
  // The norm alone: (3, 0, -3) scaled to ||a||^2 = 3.
  check_all(rl::project_sae({3, 0, -3}, {}, 3), {std::sqrt(1.5), 0, -std::sqrt(1.5)}, 1e-6);
  // Sum and order together: min (a0-2)^2 + a1^2 + a2^2, a0 + a1 + a2 = 0, a1 >= a0. Without the
  // order (4/3, -2/3, -2/3); with it active a0 = a1 = t, a2 = -2t, 12 t = 4: (1/3, 1/3, -2/3).
  check_all(rl::project_sae({2, 0, 0}, {{1, 0}}, 100), {1.0 / 3, 1.0 / 3, -2.0 / 3}, 1e-6);
  // A feasible point is its own projection (the hand tree's SAE advantages).
  const auto nodes = hand_tree();
  const auto a = rl::sae_advantages(nodes, {0, 1, 0, 1, 1}, 0.5, rl::SaeValue::expectation);
  check_all(rl::project_sae(a, rl::sae_order_constraints(nodes), 5), a, 1e-9);
  CHECK_THROWS_AS(rl::project_sae({1, 2}, {{0, 2}}, 2), Error);
  CHECK_THROWS_AS(rl::project_sae({1, 2}, {}, -1), Error);
}

TEST_CASE("rl tree: the projection is optimal (no feasible point is closer, by random search)") {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-2, 2);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 4 + trial % 4;
    std::vector<double> r0(n);
    for (double& x : r0) x = u(rng);
    std::vector<std::pair<int, int>> order = {{1, 0}, {n - 1, 2}};
    const double N = 0.5 * n;
    const auto a = rl::project_sae(r0, order, N);
    // Feasible.
    double sum = 0, sq = 0;
    for (double x : a) sum += x, sq += x * x;
    CHECK(std::abs(sum) < 1e-8);
    CHECK(sq <= N + 1e-8);
    for (auto [hi, lo] : order) CHECK(a[hi] >= a[lo] - 1e-8);
    double best = 0;
    for (int i = 0; i < n; ++i) best += (a[i] - r0[i]) * (a[i] - r0[i]);
    // Random feasible points (built to sum 0, rejected if outside the ball or the order).
    int tried = 0;
    while (tried < 2000) {
      std::vector<double> y(n);
      double m = 0;
      for (double& x : y) x = u(rng), m += x;
      double ysq = 0;
      for (double& x : y) x -= m / n, ysq += x * x;
      if (ysq > N) continue;
      bool ok = true;
      for (auto [hi, lo] : order) ok = ok && y[hi] >= y[lo];
      if (!ok) continue;
      ++tried;
      double d = 0;
      for (int i = 0; i < n; ++i) d += (y[i] - r0[i]) * (y[i] - r0[i]);
      CHECK(d >= best - 1e-9);
    }
  }
}

TEST_CASE("rl tree: score_tree gives each node its own advantage, void nodes get none") {
  // One group, two rollouts: rollout 0 fails turn 1 and gets two children (one passes);
  // rollout 1 passes turn 1. A binary reward, flat dr_grpo over the 4 nodes.
  rl::GroupResult g;
  g.rollouts.resize(2);
  auto turn = [](int t, int parent, env::Verdict v) {
    rl::TurnResult tr;
    tr.turn = t;
    tr.parent = parent;
    tr.result.verdict = v;
    if (v == env::Verdict::correct) tr.result.speedup = 1.0;
    return tr;
  };
  g.rollouts[0].turns = {turn(1, -1, env::Verdict::wrong_output), turn(2, 0, env::Verdict::correct),
                         turn(2, 0, env::Verdict::compile_error), turn(2, 0, env::Verdict::infra_error)};
  g.rollouts[1].turns = {turn(1, -1, env::Verdict::correct)};
  config::Experiment exp;
  exp.reward.kind = "binary";
  exp.turns.branch = 3;
  exp.turns.gamma = 1.0;
  exp.advantage.kind = "dr_grpo";
  REQUIRE(config::tree_scoring(exp));
  auto s = rl::score_tree(g, exp);
  // Own rewards 0 1 0 (void left out) and 1; mean 0.5.
  check_all(s[0].turn_rewards, {0, 1, 0, 0});
  check_all(s[0].turn_advantages, {-0.5, 0.5, -0.5, 0});
  check_all(s[1].turn_advantages, {0.5});
  CHECK(s[0].reward_binary == 1.0);
  CHECK(std::isnan(s[0].reward_rank));
  // MaRS with gamma 1: the failed root inherits its passing child's 1; mean over 4 nodes 0.75.
  exp.reward.tree = "max";
  s = rl::score_tree(g, exp);
  check_all(s[0].turn_returns, {1, 1, 0, 0});
  check_all(s[0].turn_advantages, {0.25, 0.25, -0.75, 0});
  CHECK(s[0].reward == 1.0);
  CHECK(s[0].advantage == doctest::Approx(0.25));
  // SAE (expectation, alpha 0.5, own rewards): V = 0.5 for the roots (nodes 0 1 0 1), 0.5 for
  // the children (1 0): a' = r - 0.25, centred: r - 0.5.
  exp.reward.tree = "none";
  exp.advantage.kind = "sae";
  s = rl::score_tree(g, exp);
  check_all(s[0].turn_advantages, {-0.5, 0.5, -0.5, 0});
  // rank is not defined on nodes.
  exp.reward.kind = "rank";
  CHECK_THROWS_AS(rl::score_tree(g, exp), Error);
}
