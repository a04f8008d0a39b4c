#pragma once
// `leap train`: SFT warm start (optional, rl/sft.hpp), then per RL step (train_step in
// trainer.cpp, read top to bottom): rollouts (rl/rollout.hpp: multi-turn, DCP, compaction) ->
// rewards and advantages (rl/scoring.hpp) -> samples -> update (rl/update.hpp: GRPO with the
// clipped surrogate, arXiv:2402.03300 section 4.1 and arXiv:1707.06347 section 3) -> metrics
// (rl/step_counters.hpp) -> one store transaction -> periodic eval and checkpoint; resume
// (DESIGN.md sections 1 and 4, docs/training.md).
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "config/experiment.hpp"

namespace leap::store {
class Store;
}
namespace leap::dist {
class ProcessGroup;
}

namespace leap::rl {

class Grader;

/// Where a training run reads and writes.
struct TrainContext {
  store::Store* store = nullptr;   ///< the SQLite store (required; with a group, on rank 0 only)
  Grader* grader = nullptr;        ///< the environment (required)
  std::string results_dir = "results";  ///< run folders: results/<run>/checkpoints, train.log
  std::string config_path;         ///< shown in messages
  std::optional<std::string> resume_run_id;  ///< continue this run from its last checkpoint
  bool progress = true;            ///< progress lines on the console
  std::string device_info;         ///< where the run computes (cli::describe_devices); stored as a "device" event
  /// Data-parallel group (not owned), or null for one process. With a group every rank calls
  /// train(): each rolls out its share of every step's groups, gradients are all-reduced, and
  /// rank 0 alone writes the store (the other ranks' rows travel to it) and the checkpoints
  /// (docs/distributed.md).
  dist::ProcessGroup* group = nullptr;
  /// Tests only: called with the block's name ("rollouts", "rewards", "samples", "update",
  /// "metrics", "store", "eval", "checkpoint") and the step at the start of each block of every
  /// RL step; whatever it throws leaves train() as a failure would. Empty: not called.
  std::function<void(std::string_view block, int64_t step)> fault_hook;
};

/// What a finished run reports.
struct TrainSummary {
  std::string run_id;
  int64_t first_step = 1;           ///< first step run by this call (> 1 after a resume)
  int64_t steps = 0;                ///< last completed step
  /// Steps per summary window: enough steps for the train split to come round once
  /// (ceil(train tasks / rollout.tasks_per_step)), at most half the steps run, at least 1.
  int64_t window = 1;
  double reward_first = 0, reward_last = 0;   ///< mean rollout reward over the first / last `window` steps run
  double acc1_start = 0, acc1_end = 0;        ///< eval Acc@1 before RL (after SFT) and at the end (NaN if no eval split)
  double accT_start = 0, accT_end = 0;
  /// Turn-1 correctness of the rollouts of the first / last `window` steps run (each window sees
  /// every train task once when tasks are drawn without repeats).
  double train_acc1_first = 0, train_acc1_last = 0;
  double seconds = 0;
  std::string checkpoint;           ///< last checkpoint folder
  /// --resume of a run that had finished: nothing was run or changed (only run_id, steps and
  /// checkpoint are set).
  bool already_finished = false;
};

/// Runs (or resumes) a training run of config::resolved(exp) (that resolved config is what the
/// run row stores). Throws leap::Error (config, model, tasks, store) with a message naming the
/// file. Once the run row exists, every exception that leaves train() first marks the run
/// `failed` with an `error` event "TYPE: message" (the exception's demangled type, e.g.
/// c10::Error or std::bad_alloc, and its message without a backtrace), except SIGINT/SIGTERM
/// (the run is `interrupted`) and a lost lease (the row is the new writer's); a leap::Error
/// propagates as itself, any other exception as a leap::Error "run R: TYPE: message" (exit 1).
/// The writing process holds the run's lease (store::RunLease, refreshed per step): a resume
/// while the holder lives throws naming its pid and changes nothing; a stale lease (a dead pid on
/// this host, or 2 hours without refresh from another host) is taken over with a `lease` event.
/// Resuming a finished run changes nothing (summary.already_finished); resuming after a crash
/// during the final evaluation redoes it.
/// With ctx.group, a failed collective (a dead or hung rank, after dist.timeout_s) throws
/// leap::Error on the surviving ranks. The summary is the same on every rank.
TrainSummary train(const config::Experiment& exp, const TrainContext& ctx);

}  // namespace leap::rl
