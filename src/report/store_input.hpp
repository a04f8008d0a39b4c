#pragma once
// Filling report::MetricsInput from store rows: an evaluation's eval_results, or a run's training
// turns (each group of a step is one problem instance, each rollout one sample).
#include <cstdint>
#include <string>

#include "util/bench_metrics.hpp"
#include "store/database.hpp"

namespace leap::report {

/// Attempts of evaluation `evaluation_id` (eval_results joined with tasks; tokens are 0, the table
/// holds none). Throws leap::StoreError on a query failure.
metrics::MetricsInput eval_input(store::Database& db, int64_t evaluation_id);

/// Attempts of run `run_id`'s training turns with step in [first_step, last_step]; the task key
/// is "<step>/<group_index>/<task name>", tokens are completion tokens, `suspicious` is stored.
metrics::MetricsInput train_input(store::Database& db, const std::string& run_id, int64_t first_step, int64_t last_step);

}  // namespace leap::report
