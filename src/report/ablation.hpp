#pragma once
// The ablation table: one row per arm (runs whose configs differ only in seeds and names), the
// differing config switches as columns, then the DESIGN.md section 5 metrics (mean ± spread).
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

/// Groups `runs` into arms, in the order of each arm's first run.
std::vector<Arm> group_arms(const std::vector<RunSummary>& runs);

/// The ablation table of `runs`: columns arm, runs, the switches that differ between the runs,
/// then steps, final eval Acc@1..T, fast_1, geo-mean speedup, compile rate, activated groups %,
/// env calls, env / generation / update seconds per step, tokens per success, wall seconds and
/// (when `target` > 0) seconds to reach eval Acc@1 >= target. Arms of several runs show
/// "mean ± sample std".
Table ablation_table(const std::vector<RunSummary>& runs, double target);

/// Per-run curve summaries: metric, points, first, last, min, max, mean of the last 10%.
Table curve_table(const std::string& run_id, const std::vector<CurveSummary>& curves);

}  // namespace leap::report
