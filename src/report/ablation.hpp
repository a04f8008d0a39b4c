#pragma once
// The ablation table: one row per arm (runs whose configs differ only in seeds and names), the
// differing config switches as columns, then the DESIGN.md section 5 metrics (mean ± standard
// error over the arm's runs, i.e. over seeds).
#include <string>
#include <vector>

#include "report/runs.hpp"
#include "report/table.hpp"

namespace leap::report {

/// Runs with the same config apart from ignored_key()s.
struct Arm {
  std::vector<const RunSummary*> runs;
  std::string label;  ///< "<name> (<run id>)" for one run, "<name> (n seeds)" for several
};

/// Mean, sample standard deviation and standard error of the mean of some values.
struct MeanSpread {
  int64_t n = 0;     ///< values that are not NaN
  double mean = NAN;
  double std = NAN;  ///< sample std (divides by n - 1); NaN for n < 2
  double se = NAN;   ///< std / sqrt(n); NaN for n < 2
};

/// mean_spread over the non-NaN entries of `values`.
MeanSpread mean_spread(const std::vector<double>& values);

/// "mean ± se" (n >= 2), "mean" (n == 1) or "-" (no value), with `digits` decimals.
std::string format_mean_spread(const std::vector<double>& values, int digits);

/// An arm's label: "name (run-id)" for one run, "name (N seeds)" for N runs of distinct seeds,
/// "name (N runs, K seeds)" when a seed repeats; runs not finished are named by status and count
/// (", 1 interrupted"), so a pooled mean that holds a cut-short run says so.
std::string arm_label(const Arm& arm);

/// Groups `runs` into arms, in the order of each arm's first run; each labelled by arm_label, and
/// arms that share a name by the switches that differ between them too: "name [k=v, ...] (...)".
std::vector<Arm> group_arms(const std::vector<RunSummary>& runs);

/// The ablation table of `runs`: columns arm, runs, the switches that differ between the runs,
/// then steps, eval Acc@1 of the first eval (the policy before RL), final eval Acc@1..T, eval
/// turns per pass, fast_1, geo-mean speedup, compile rate, activated groups %, env calls, env
/// calls per step, env / generation / update seconds per step, tokens per success, wall seconds
/// and (when `target` > 0) seconds from the run's start to eval Acc@1 >= target (with "(k/n
/// reached)" when some runs never got there). Arms of several runs show "mean ± standard error".
Table ablation_table(const std::vector<RunSummary>& runs, double target);

/// The ablation table cut into tables narrow enough for a 1400 px window, each starting with the
/// arm: "arms" (runs and the differing switches; its cells may wrap), "accuracy" (steps, Acc@1 at
/// the start, final Acc@1..T, turns per pass), "kernels" (fast_1, geo-mean speedup, compile rate,
/// infra errors), "environment calls" (activated groups, env calls, env calls per step, tokens per
/// success) and "time" (seconds per step, wall time, time to target). Every column of `wide` lands
/// in exactly one of them.
std::vector<Table> split_ablation_table(const Table& wide);

/// Per-run curve summaries: metric, points, first, last, min, max, mean of the last 10%.
Table curve_table(const std::string& run_id, const std::vector<CurveSummary>& curves);

}  // namespace leap::report
