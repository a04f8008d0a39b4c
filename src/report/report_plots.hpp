#pragma once
// Which plots `leap report` draws (docs/report.md "Plots"): each arm's curve as the mean over its
// seeds with a band for the standard error, against step, wall time and environment calls.
#include <vector>

#include "report/plots.hpp"
#include "report/runs.hpp"
#include "store/store.hpp"

namespace leap::report {

/// The report's plots for `runs` (grouped into arms as in the ablation table): train Acc@1 and
/// Acc@T per step with the evaluations marked, against step, wall time (minutes) and cumulative
/// env calls; mean reward (arms whose reward is not zero-sum by construction, i.e. not
/// `reward.kind: rank`); mean turn of first success; env calls per passing rollout; env calls per
/// step; DCP activation. Throws leap::StoreError.
std::vector<PlotSpec> report_plots(store::Store& st, const std::vector<RunSummary>& runs);

}  // namespace leap::report
