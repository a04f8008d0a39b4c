#pragma once
// The HTML page of `leap report`: the ablation tables (cut to fit a 1400 px window), the plots
// inlined at full content width with their captions, and the per-run curve tables.
#include <string>
#include <vector>

#include "report/plots.hpp"
#include "report/table.hpp"

namespace leap::report {

/// A self-contained HTML document (no scripts, no external files). `tables`: the ablation tables
/// in order (split_ablation_table); `curves`: per-run curve tables (folded under <details>);
/// `plots`: SVG files inlined in order with their captions; `plot_note`: a line shown above the
/// plots (why there are none, or which were left out), may be empty. Throws leap::Error when a
/// plot file cannot be read.
std::string html_report(const std::string& store_path, const std::vector<Table>& tables,
                        const std::vector<Table>& curves, const std::vector<WrittenPlot>& plots,
                        const std::string& plot_note);

}  // namespace leap::report
