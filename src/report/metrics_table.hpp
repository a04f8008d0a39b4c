#pragma once
// A MetricsReport as a Table (one row per level, then "all") and as JSON.
#include <nlohmann/json.hpp>

#include "util/bench_metrics.hpp"
#include "report/table.hpp"

namespace leap::report {

/// Rows per level and overall; columns tasks, attempts, compile_rate, acc@1..T, pass@k, fast_p,
/// geomean_speedup, turns_per_pass, tokens_per_success, hacks ("kind=n" list).
Table metrics_table(const metrics::MetricsReport& m);

/// {"turns", "samples", "overall": {...}, "levels": {"1": {...}}}; NaN becomes null.
nlohmann::json metrics_json(const metrics::MetricsReport& m);

}  // namespace leap::report
