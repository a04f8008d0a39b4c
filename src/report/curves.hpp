#pragma once
// Per-step curves of a run read from the store (train Acc@1 / Acc@T, reward, turn of first success,
// turns per pass, env calls, DCP activation, the evaluations), on three x-axes (step, wall time,
// cumulative env calls), and their mean over an arm's seeds with the spread.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "report/runs.hpp"
#include "store/store.hpp"

namespace leap::report {

/// One x-axis of a curve.
enum class XAxis {
  step,       ///< the training step
  wall_min,   ///< minutes since the run started (the step's end; an evaluation's stored time)
  env_calls,  ///< training turns evaluated up to and including the step (cumulative; eval excluded)
};

/// One point of a run's curve: the x values on every axis and the y value.
struct CurvePoint {
  int64_t step = 0;
  double wall_min = 0, env_calls = 0;
  double y = 0;
};

/// The per-step curves of one run. Names (see docs/report.md "Plots"):
/// `train_acc@1`, `train_acc@T` (share of the step's rollouts correct at turn 1 / at any turn),
/// `reward_mean`, `first_success_turn` (mean over the step's rollouts that passed),
/// `turns_per_pass` (the step's env calls / its passing rollouts), `env_calls` (per step),
/// `dcp_activated` (share of the step's groups expanded), `eval_acc@1`, `eval_acc@T` (T: the
/// run's own last turn; one point per evaluation).
struct RunCurves {
  std::string run_id;
  std::map<std::string, std::vector<CurvePoint>> curves;
};

/// Reads the curves of `run` from the store: training figures from the groups, rollouts and turns
/// tables (the trainer's step metrics when a run has no rollout rows), evaluations from the
/// `eval/acc@t` metrics. Throws leap::StoreError.
RunCurves read_run_curves(store::Store& st, const RunSummary& run);

/// An arm's curve on one x-axis: at each step that every run of the arm has, the mean over the
/// runs of x and of y, and mean ± standard error of y (lo = hi = mean for a single run).
struct ArmCurve {
  std::vector<double> x, y, lo, hi;
  int64_t runs = 0;  ///< runs averaged
};

/// The mean of `curve` over `runs` (each a run of one arm) against `axis`; empty when any run
/// lacks the curve. Points are matched by step.
ArmCurve average_over_seeds(const std::vector<const RunCurves*>& runs, const std::string& curve, XAxis axis);

}  // namespace leap::report
