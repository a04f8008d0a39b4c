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

/// Scores a group with the experiment's `reward`, `advantage` and `turns.gamma`:
/// rank: r_i from the tournament is the advantage, turn credit gamma^(k_i - t) A_i for A_i > 0;
/// binary: r_i = final turn correct, estimator over the group, the same advantage on every turn;
/// speedup / kernelgym: per-turn rewards, discounted returns G_t, estimator baseline from G_1.
/// A void rollout (RolloutResult::infra_error: the environment, not the answer, failed) is left
/// out: the others are scored as a group without it, and it gets 0 for every reward and advantage.
std::vector<ScoredRollout> score_group(const GroupResult& group, const config::Experiment& exp);

}  // namespace leap::rl
