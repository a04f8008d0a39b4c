#pragma once
// The supervised warm start (`train.sft`, docs/training.md): steps of token-mean negative
// log-likelihood on the train split's shipped solutions, optionally with environment-checked
// wrong twins (rl/mutants.hpp), before the first RL step.
#include <atomic>
#include <random>
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

/// The supervised examples of the warm start and what they are.
struct SftPool {
  /// In order: one per shipped solution (prompt = the turn-1 prompt, target = the solution +
  /// the end-of-turn token), then per solution its chosen wrong twins' examples.
  std::vector<TrainSample> samples;
  size_t solutions = 0;    ///< shipped solutions (the first `solutions` samples)
  size_t wrong_twins = 0;  ///< samples whose target is a wrong twin (train.sft.mutants)
  size_t second_turn = 0;  ///< second-turn examples (train.sft.second_turn)
  /// Per solution sample (index i < `solutions`): the completion ids of its systematic twin
  /// (train.sft.teacher_error, rl/mutants.hpp systematic_twin), empty when it has none; empty
  /// vector when teacher_error is off. Later samples never have one.
  std::vector<std::vector<int64_t>> teacher_twins;
  /// Solutions with a systematic twin (the non-empty entries of teacher_twins).
  size_t teacher_errors() const;
  size_t graded = 0;       ///< mutants the environment graded to choose the twins
  /// Shipped solutions left out because the environment graded them wrong (a compile, launch or
  /// runtime error, or wrong output); each is warned of, naming its task.
  size_t left_out = 0;
  std::string twins;       ///< "task: line L: 'a' -> 'b' (verdict); ..." of every chosen twin
};

/// Builds the warm start's examples from the train split's shipped solutions, after grading
/// them (one `ctx.grader` call): one graded wrong_output or a format, compile, launch or runtime error is
/// left out with a warning (SftPool::left_out); a timeout or infra_error is kept with one. With
/// n = max(train.sft.mutants, train.sft.second_turn) > 0, each solution also gets up to n wrong
/// twins: its one-edit mutants (rl/mutants.hpp; only train.sft.mutant_kinds' kinds when that list
/// is not empty) in a seeded order, at most 8 graded by
/// `ctx.grader`, wrong_output ones first, then compile, launch or runtime errors (never correct,
/// timeout or infra_error); grading runs in rounds and stops for a solution once it has n
/// wrong_output twins. Of a solution's twins, the first train.sft.mutants become turn-1 targets
/// (prompt = the turn-1 prompt, target = the twin) and the first train.sft.second_turn become
/// second-turn examples: prompt = next_turn_context(turn-1 messages, the twin, its verdict, the
/// environment's feedback on it, its speedup) (rl/prompts.hpp, the context the rollout engine
/// builds for turn 2 after that answer), target = the correct solution. With
/// train.sft.twin_solutions = m > 0, only m solutions (a seeded sample) get twins, so at most 8m
/// mutants are graded whatever the set's size. With train.sft.teacher_error > 0, every solution
/// whose systematic_twin (rl/mutants.hpp; kinds train.sft.mutant_kinds) differs from it gets that
/// twin in teacher_twins (not graded), for teacher_sample to draw. Throws what the tokenizer and
/// the grader throw.
SftPool build_sft_pool(SftContext& ctx);

/// Sample `i` of `pool` as the teacher gives it on one draw: with probability `teacher_error` (one
/// uniform draw from `rng`) its systematic twin's completion instead of its own, when it has one; a
/// teacher that makes the same mistake on that fraction of its answers, whatever the program, so
/// the policy cannot tell from the program which answer it will see. Throws std::out_of_range for
/// an `i` outside the pool.
TrainSample teacher_sample(const SftPool& pool, size_t i, double teacher_error, std::mt19937_64& rng);

/// The supervised learning rate of SFT step `step` (1-based): train.sft.lr when the schedule is
/// constant; for "cosine", lr * (1 + cos(pi * (step - 1) / (steps - 1))) / 2, so lr at step 1 and 0
/// at the last step.
double sft_lr(const config::SftConfig& sft, int64_t step);

/// Copy examples of the induction warm-up (train.sft.copy_steps): each example is the whole
/// prompt of a sample of the pool as the prompt and a window of min(tokens, prompt length)
/// consecutive token ids of it as the target (the sample and the window's start drawn uniformly),
/// so the copied span lies as far back as the PyTorch lines an answer copies, at a distance that
/// varies (a fixed offset would let a positional head copy instead). A model trained from scratch
/// has no induction heads (Olsson et al. 2022, "In-context learning and induction heads"), the
/// circuit that copies a span it has seen before, which a pretrained LLM brings and the generated
/// family's answers need; this task asks for that circuit on the set's own tokens (measured on the
/// generated family, it did not help: docs/results.md).
class CopyExamples {
 public:
  /// Finds the samples of `pool` that have a prompt (once). `pool` must outlive this object.
  /// Throws leap::Error when no sample has a prompt token or tokens < 1.
  CopyExamples(const std::vector<TrainSample>& pool, int64_t tokens);
  /// `count` copy examples drawn from `rng`.
  std::vector<TrainSample> draw(int64_t count, std::mt19937_64& rng) const;

 private:
  const std::vector<TrainSample>& pool_;
  int64_t tokens_;
  std::vector<size_t> with_prompt_;  ///< indices of pool_'s samples with a prompt
};

/// Runs exp.train.sft.copy_steps copy steps (CopyExamples, train.sft.batch_size per step, at
/// train.sft.lr; `sft/copy_loss` at steps <= -steps, one `sft_copy` event), then
/// exp.train.sft.steps supervised steps (the same AdamW at sft_lr(train.sft, step), batches of
/// train.sft.batch_size drawn from a seeded shuffle of build_sft_pool's samples; token-mean NLL
/// of the targets). Stores `sft/loss` at steps <= 0 and one `sft` event. Warns and returns
/// when the split has no shipped solution. Throws what the model, the grader and the store throw.
void run_sft(SftContext& ctx);

}  // namespace leap::rl
