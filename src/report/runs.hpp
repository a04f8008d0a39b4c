#pragma once
// What `leap report` reads of one run: its config, the final evaluation, step totals and curves.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "store/records.hpp"
#include "store/store.hpp"

namespace leap::report {

/// A run's numbers for the ablation table. Every value may be NaN (not measured).
struct RunSummary {
  store::RunRow run;
  std::map<std::string, std::string> config;  ///< flattened config_yaml (see config_diff.hpp)
  int64_t steps = 0;                          ///< completed steps
  int64_t turns = 1;                          ///< T of the final eval's Acc@1..T
  std::vector<double> eval_acc;               ///< final eval Acc@1..T
  double eval_acc1_start = NAN;               ///< Acc@1 of the run's first eval (step 0: the SFT / initial policy)
  double eval_turns_per_pass = NAN;           ///< final eval: mean first-correct turn of its correct samples
  double eval_fast_1 = NAN, eval_geomean_speedup = NAN, eval_compile_rate = NAN;
  std::optional<int64_t> eval_step;           ///< step of the final eval
  double activated_groups_pct = NAN;          ///< DCP-activated groups / groups (else mean activated_groups_frac), %
  double env_calls = NAN;                     ///< environment evaluations (turns) over the run
  /// Evaluations that ended in `infra_error` (the environment failed, not the answer; unscored):
  /// training turns plus the final eval's results.
  int64_t infra_errors = 0;
  double env_calls_per_step = NAN;            ///< env_calls / steps (training rollouts only, no eval)
  double env_seconds = NAN, generation_seconds = NAN, update_seconds = NAN;  ///< mean per step
  double tokens_per_success = NAN;            ///< generated tokens / successful rollouts (training)
  double wall_seconds = NAN;                  ///< ended_at (or the last step's end) - started_at
  double time_to_target_s = NAN;              ///< first eval/acc@1 >= target, seconds after start
  /// Status `running` whose writer is gone (store::lease_stale_reason: killed without a chance
  /// to mark the run, e.g. SIGKILL or the OOM killer): why; empty otherwise.
  std::string writer_gone;
};

/// One metric's curve summary for a run.
struct CurveSummary {
  std::string metric;
  int64_t points = 0;
  double first = NAN, last = NAN, min = NAN, max = NAN;
  double tail_mean = NAN;  ///< mean of the last 10% of the points (at least one)
};

/// Metrics summarised in the per-run curve table, in order.
const std::vector<std::string>& curve_metrics();

/// Reads run `run_id`'s summary. The final eval is the run's latest evaluation with results
/// (scored with compute_metrics), else the latest `eval/acc@t`, `eval/fast_1`, ... metrics.
/// `target` > 0: also the wall time to reach eval Acc@1 >= target. Throws leap::StoreError.
RunSummary summarize_run(store::Store& st, const std::string& run_id, double target);

/// Curve summaries of every curve_metrics() entry the run has points for.
std::vector<CurveSummary> summarize_curves(store::Store& st, const std::string& run_id);

/// Metric series of `run_id` for plots: the first of `names` the run has points for (empty if none).
std::vector<store::MetricPoint> first_series(store::Store& st, const std::string& run_id,
                                             const std::vector<std::string>& names);

}  // namespace leap::report
