#pragma once
// The supervised warm start (`train.sft`, docs/training.md): steps of token-mean negative
// log-likelihood on the train split's shipped solutions, optionally with environment-checked
// wrong twins (rl/mutants.hpp), before the first RL step.
#include <atomic>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "rl/update.hpp"

namespace leap::env {
class RuntimeTask;
}
namespace leap::store {
class Store;
}
namespace leap::tasks {
struct TaskSpec;
}

namespace leap::rl {

class Grader;
class LocalPolicy;

/// What the warm start reads and writes (references into the trainer's run; not owned).
struct SftContext {
  const config::Experiment& exp;
  model::Transformer& model;
  const std::vector<at::Tensor>& params;              ///< the trained tensors
  LocalPolicy& policy;                                ///< encodes prompts and solutions
  Grader& grader;                                     ///< grades the wrong-twin candidates
  const std::vector<const env::RuntimeTask*>& tasks;  ///< the train split
  UpdateOptions update;                               ///< sft_step's options (temperature forced to 1)
  int rank = 0, world = 1;                            ///< data parallel: each rank takes its share of a batch
  store::Store* db = nullptr;                         ///< rank 0: `sft/loss` metrics and the `sft` event
  std::string run_id;
  bool progress = true;
  const std::atomic<bool>* interrupted = nullptr;     ///< set: stop after the running step
};

/// The shipped solutions of `spec` for `backend` (files solutions/<backend>_*.md, sorted by name).
std::vector<std::string> shipped_solutions(const tasks::TaskSpec& spec, const std::string& backend);

/// Runs exp.train.sft.steps supervised steps (own AdamW at train.sft.lr, batches of
/// train.sft.batch_size drawn from a seeded shuffle of the pool): prompt = the turn-1 prompt,
/// target = the solution + the end-of-turn token. With train.sft.mutants > 0 the pool also gets
/// up to that many wrong twins per solution (graded first; wrong_output first, then compile,
/// launch or runtime errors, never timeout or correct). Stores `sft/loss` at steps <= 0 and one
/// `sft` event. Warns and returns when the split has no shipped solution. Throws what the
/// model, the grader and the store throw.
void run_sft(SftContext& ctx);

}  // namespace leap::rl
