#pragma once
// From a group's graded rollouts to rewards and per-sample advantages: the configured reward
// kind, its advantage (estimator, discounted returns, turn credit), and every reward component
// for the store (DESIGN.md section 4; the sources are named in rl/reward.hpp and rl/advantage.hpp).
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "rl/reward.hpp"
#include "rl/rollout.hpp"

namespace leap::rl {

/// Rewards and advantages of one rollout.
struct ScoredRollout {
  double reward = 0;       ///< of the configured reward.kind (rollout level)
  double advantage = 0;    ///< rollout-level advantage before turn credit
  double reward_rank = 0, reward_binary = 0, reward_speedup = 0, reward_kernelgym = 0;
  std::vector<double> turn_rewards;     ///< R_t per graded turn
  std::vector<double> turn_returns;     ///< G_t per graded turn
  std::vector<double> turn_advantages;  ///< advantage applied to each graded turn's tokens
};

/// The RolloutOutcome of a rollout (correctness, speedups, tokens). A suspicious result's speedup
/// counts as at most `suspicious_cap` (env.timing.suspicious_speedup; docs/training.md).
RolloutOutcome outcome_of(const RolloutResult& rollout, double suspicious_cap = HUGE_VAL);

/// Node-level scoring of a group's debugging tree (every graded turn of its rollouts is a node;
/// rl/tree_advantage.hpp): each node's own reward is the reward kind's per-turn reward (binary:
/// correct; speedup, kernelgym: their R_t), reward.tree propagates subtree rewards (Murphy), and
/// the advantage of each node is advantage.kind over the group's nodes: grpo, dr_grpo, rloo on the
/// nodes' rewards as one flat group; sae (Tree-OPO) r - alpha V(prefix), centred; sae_projection
/// that projected onto {sum 0, ||a||^2 <= nodes, correct child >= failed parent}. Per rollout:
/// turn_rewards are the nodes' own rewards, turn_returns their tree rewards, turn_advantages their
/// advantages; reward is the best node's tree reward (binary: 1 if any node passed), advantage
/// the turn-1 node's; reward_binary is 1 if any node of
/// the rollout passed, reward_speedup and reward_kernelgym the best node's, reward_rank NaN (the
/// tournament is not defined on trees). A void node (infra_error) is left out of the group and
/// gets 0. Throws leap::Error for reward.kind rank.
std::vector<ScoredRollout> score_tree(const GroupResult& group, const config::Experiment& exp);

/// Scores a group with the experiment's `reward`, `advantage` and `turns.gamma` (with
/// tree_scoring(exp), score_tree; otherwise as follows):
/// rank: r_i from the tournament is the advantage, turn credit gamma^(k_i - t) A_i for A_i > 0;
/// binary: r_i = final turn correct, estimator over the group, the same advantage on every turn;
/// speedup / kernelgym: per-turn rewards, discounted returns G_t, estimator baseline from G_1.
/// A void rollout (RolloutResult::infra_error: the environment, not the answer, failed) is left
/// out: the others are scored as a group without it, and it gets 0 for every reward and advantage.
std::vector<ScoredRollout> score_group(const GroupResult& group, const config::Experiment& exp);

}  // namespace leap::rl
