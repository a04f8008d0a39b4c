#pragma once
// `leap eval --bench NAME (--model PATH | --run RUN_ID [--checkpoint N])`: rollouts of a policy
// with the training engine (no update), every turn stored, metrics per level and overall.
#include <cstdint>
#include <string>

#include "cli/commands.hpp"
#include "config/experiment.hpp"

namespace leap::cli {

/// What to evaluate.
struct ModelEvalArgs {
  std::string bench;       ///< "starter", "kernelbench" (tasks/<name>) or a task-set folder
  std::string model;       ///< checkpoint folder, or empty with run
  std::string run;         ///< run id whose checkpoint to load
  int64_t checkpoint = -1; ///< step of --run's checkpoint (-1: the last)
  int64_t turns = 0;       ///< 0: eval.turns
  int64_t samples = 0;     ///< 0: eval.samples
  std::string levels;      ///< "1,2" or empty
  std::string split;       ///< a split of the set's set.yaml (train, eval, ...), or empty / "all": every task
  int64_t limit = 0;
  std::string backend;     ///< cpu | cuda
  bool full_size = false;  ///< run tasks without sizes for the backend (sizes_cpu: none) at their full sizes
  std::string format = "table";
  /// A new folder: each answer saved as <task>/s<sample>_t<turn>.md (the layout `--solutions`
  /// reads), its path in eval_results.file; empty: answers are not kept.
  std::string save_answers;
};

/// The task-set folder of `--bench NAME|DIR`: DIR itself, or tasks/NAME (from the working folder,
/// then the source tree). Throws UsageError (with the import command for kernelbench) when none.
std::string bench_dir(const std::string& bench);

/// Runs the evaluation, prints the table (or JSON), stores it. Returns the exit status.
/// Throws UsageError for a missing bench, model or run, leap::Error for broken inputs.
int eval_model(const ModelEvalArgs& args, config::Experiment exp, const GlobalOptions& g);

}  // namespace leap::cli
