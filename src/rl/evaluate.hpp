#pragma once
// Evaluation with the training rollout engine and no update: k samples per task, up to T turns,
// every failed sample debugged (no DCP). Used for the periodic eval of `leap train` and by
// `leap eval --bench --model/--run`. Metric definitions: DESIGN.md section 5.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rl/rollout.hpp"

namespace leap::rl {

/// Summary figures of one evaluation. Shares are over (task, sample) pairs.
struct EvalSummary {
  int64_t tasks = 0;
  int64_t samples = 0;               ///< k per task
  std::vector<double> acc_at;        ///< acc_at[t-1] = share correct by turn t (cumulative), t = 1..T
  std::map<double, double> fast_p;   ///< p -> share correct with speedup > p (final solution)
  double compile_rate = 0;           ///< share of turn-1 answers that compiled (not format/compile error)
  double geomean_speedup = 0;        ///< of the first correct solutions (NaN if none)
  double pass_at_k = 0;              ///< share of tasks with at least one correct sample
};

/// Computes the summary of `groups` (one per task, k rollouts each) for thresholds `fast_p`.
EvalSummary summarize_eval(const std::vector<GroupResult>& groups, int max_turns, const std::vector<double>& fast_p);

/// Metric name -> value, as `leap train` logs them: "eval/acc@1".."eval/acc@T", "eval/fast_1",
/// "eval/geomean_speedup", "eval/compile_rate", "eval/pass@k".
std::map<std::string, double> eval_metrics(const EvalSummary& s);

}  // namespace leap::rl
