#pragma once
// Evaluation with the training rollout engine and no update: k samples per task, up to T turns,
// every failed sample debugged (no DCP). Used for the periodic eval of `leap train` and by
// `leap eval --bench --model/--run`. Metric definitions: DESIGN.md section 5, computed by
// util/bench_metrics.hpp (the same function `leap eval` and `leap report` use, so a figure logged
// during training is the figure `leap report` shows for the same evaluation).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "env/task_runtime.hpp"
#include "rl/rollout.hpp"
#include "util/bench_metrics.hpp"

namespace leap::rl {

/// Summary figures of one evaluation (the overall slice of metrics::compute_metrics). Shares are
/// means over tasks of the share of a task's samples; void (infra_error) samples left out.
struct EvalSummary {
  int64_t tasks = 0;
  int64_t samples = 0;               ///< k per task
  std::vector<double> acc_at;        ///< acc_at[t-1] = Acc@t: share correct by turn t (cumulative), t = 1..T
  std::map<double, double> fast_p;   ///< p -> share correct with a best speedup > p (fast_0: correct)
  double compile_rate = 0;           ///< share of all attempts (every turn) past compilation
  double geomean_speedup = 0;        ///< of each correct sample's best speedup (NaN if none)
  double pass_at_k = 0;              ///< unbiased pass@k at k = samples (share of tasks solved when k = n)
};

/// The attempt rows of `groups` (one per task, group.task_index into `tasks`; rollout i is sample
/// i; one attempt per turn with its verdict, finite speedup, generated tokens and suspicious flag)
/// for T = `max_turns` and thresholds `fast_p` (empty: metrics::kFastP).
metrics::MetricsInput metrics_input(const std::vector<GroupResult>& groups,
                                    const std::vector<const env::RuntimeTask*>& tasks, int max_turns,
                                    const std::vector<double>& fast_p = {});

/// Computes the summary of `groups` (one per task of `tasks`, k rollouts each) with
/// metrics::compute_metrics over metrics_input.
EvalSummary summarize_eval(const std::vector<GroupResult>& groups, const std::vector<const env::RuntimeTask*>& tasks,
                           int max_turns, const std::vector<double>& fast_p);

/// Metric name -> value, as `leap train` logs them: "eval/acc@1".."eval/acc@T", "eval/fast_1",
/// "eval/geomean_speedup", "eval/compile_rate", "eval/pass@k".
std::map<std::string, double> eval_metrics(const EvalSummary& s);

}  // namespace leap::rl
