#pragma once
// The counts and sums one RL step reports (table `metrics`, docs/training.md "Metrics"), gathered
// from this rank's groups and added up over the data-parallel ranks. No torch.
#include <cstdint>
#include <vector>

#include "rl/rollout.hpp"
#include "rl/scoring.hpp"

namespace leap::dist {
class ProcessGroup;
}

namespace leap::rl {

/// One step's counters. Counts and sums add up over ranks; the two times are the slowest rank's.
struct StepCounters {
  int64_t groups = 0;
  int64_t rollouts = 0;             ///< scored rollouts (void ones, with an infra_error, left out)
  int64_t infra_errors = 0;         ///< void rollouts: a turn ended in infra_error (unscored)
  int64_t turn1_correct = 0;        ///< rollouts correct at turn 1
  int64_t final_correct = 0;        ///< rollouts correct at some turn
  int64_t zero_adv_groups = 0;      ///< groups whose turn advantages are all zero
  int64_t activated_groups = 0;     ///< groups DCP expanded
  int64_t recovered = 0;            ///< rollouts failed at turn 1, correct later
  int64_t turns = 0;                ///< graded turns of the trained groups
  int64_t samples = 0;              ///< training samples (turns and summaries with tokens)
  int64_t env_calls = 0, env_calls_saved = 0;
  int64_t compaction_events = 0, compaction_tokens_saved = 0;
  double reward_sum = 0;            ///< of the configured reward kind, over rollouts
  double binary_sum = 0;            ///< binary reward, over rollouts
  double response_tokens = 0;       ///< completion tokens of the counted turns (tokens)
  double generation_seconds = 0;    ///< max over ranks (s)
  double env_seconds = 0;           ///< max over ranks (s)

  /// Sums the counts and sums over the ranks and takes the max of the times (two collectives;
  /// every rank must call). Throws leap::Error when a collective fails.
  void all_reduce(dist::ProcessGroup& group);

  double reward_mean() const { return rollouts ? reward_sum / static_cast<double>(rollouts) : 0.0; }
  double train_acc1() const { return rollouts ? static_cast<double>(turn1_correct) / static_cast<double>(rollouts) : 0.0; }
  double train_accT() const { return rollouts ? static_cast<double>(final_correct) / static_cast<double>(rollouts) : 0.0; }
  double activated_frac() const { return groups ? static_cast<double>(activated_groups) / static_cast<double>(groups) : 0.0; }
};

/// This rank's counters of one step: `groups` with their scores, `trained[g]` whether group g's
/// turns became samples (DAPO dynamic sampling drops all-zero groups; their turns are not
/// counted in `turns` and `response_tokens`), `samples` the number of training samples and the
/// engine's totals `es`.
StepCounters count_step(const std::vector<GroupResult>& groups, const std::vector<std::vector<ScoredRollout>>& scored,
                        const std::vector<bool>& trained, int64_t samples, const EngineStats& es);

}  // namespace leap::rl
