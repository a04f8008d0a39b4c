#pragma once
// A synthetic training run written through the Store API, for the report and export tests: steps
// with groups, rollouts and turns, the trainer's step metrics, and evaluations at step 0 and at
// the end (as `eval/acc@t` metrics).
#include <string>

#include "store/store.hpp"

namespace leap::test {

/// What one synthetic run looks like.
struct SyntheticRun {
  std::string id, name;
  std::string reward_kind = "rank";  ///< written as reward.kind
  bool dcp = true;                   ///< written as dcp.enabled
  int seed = 0;
  int steps = 12;
  double t0 = 1000;                  ///< started_at (Unix seconds); each step takes 30 s
  double skill = 0.3;                ///< share of turn-1 passes at step 1; grows by 0.04 per step
};

/// Writes the run and returns its id. Step k has 4 groups of 4 rollouts; rollout r of group g
/// passes at turn 1 when (g * 4 + r) < 16 * min(1, skill + 0.04 (k - 1)), a failure gets a second
/// turn (passing for odd r) in groups DCP expands (dcp: groups 0 and 1). Metrics: reward_mean
/// (0 for rank, else the pass share), train_acc@1, train_acc@T, env_calls, loss (1 / k);
/// eval/acc@1 and eval/acc@2 at step 0 and at the last step.
std::string write_synthetic_run(store::Store& st, const SyntheticRun& r);

}  // namespace leap::test
