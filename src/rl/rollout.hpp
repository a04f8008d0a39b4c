#pragma once
// The multi-turn rollout engine (DESIGN.md sections 1 and 4): G samples per task, the environment
// grades every turn, DCP (rl/dcp.hpp, LEAP) decides after turn 1 which groups get debugging turns,
// later turns see the (compacted, rl/compaction.hpp) context plus the previous verdict's feedback,
// as in Kevin's multi-turn refinement (arXiv:2507.11948). With `branch` > 1 each expanded attempt
// gets several feedback-conditioned children, a debugging tree as in Murphy (arXiv:2511.07833).
// Used by training and `leap eval`.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "env/verdict.hpp"
#include "rl/dcp.hpp"
#include "rl/grader.hpp"
#include "rl/knowledge_base.hpp"
#include "rl/policy.hpp"

namespace leap::rl {

/// What the engine does; the trainer fills it from the experiment.
struct EngineOptions {
  std::string backend = "cpu";     ///< answer language shown in the prompt: cpu | cuda
  SampleOptions sampling;          ///< seed is the base; every generation call mixes in its turn
  int max_turns = 3;               ///< T
  int branch = 1;                  ///< children per expanded attempt: 1 = a chain, > 1 = a tree (Murphy)
  int64_t max_env_calls = 0;       ///< graded turns per group at most (turn 1 always runs); 0 = no cap
  bool refine_after_success = false;
  DcpOptions dcp;                  ///< enabled = false: every failed rollout is expanded
  bool compaction = true;
  int64_t max_prompt_tokens = 2048;  ///< compaction budget of a turn's prompt (tokens)
  std::string compaction_strategy = "digest";  ///< digest | summary
  int64_t summary_max_tokens = 256;
  std::shared_ptr<const KnowledgeBase> kb;  ///< null: no knowledge base (config kb.dir empty)
  KbOptions kb_options;                     ///< where its snippets go and how many tokens
};

/// One generated sample of a rollout: a graded turn, or (strategy `summary`) a summary the
/// policy wrote while compacting, which is trained but not graded.
struct TurnResult {
  int turn = 1;                 ///< 1-based turn this sample belongs to (a summary: the turn it precedes)
  int parent = -1;              ///< graded turn of the same rollout this one continues (index into
                                ///< RolloutResult::turns); -1 for turn 1 (and for summaries)
  int next_turn = -1;           ///< a summary: the graded turn generated from its compact record
                                ///< (index into RolloutResult::turns; its advantage is the summary's)
  int segment = 0;              ///< 0-based compaction segment
  bool is_summary = false;
  bool compacted = false;       ///< this turn's prompt is a compact record of earlier turns
  Prompt prompt;                ///< messages shown
  std::string prompt_text;      ///< rendered prompt
  Sample sample;                ///< completion and token ids
  env::EvalResult result;       ///< verdict and feedback (not set for summaries)
  std::vector<std::string> kb_snippets;  ///< knowledge-base snippet ids first added by this turn's prompt
  double env_seconds = 0;       ///< share of the batch's grading wall time (s)
};

/// One rollout (trajectory): a chain of turns, or with branch > 1 the debugging tree grown from
/// one turn-1 answer. Turns are listed in the order they were graded, so by turn (depth), a
/// parent before its children.
struct RolloutResult {
  std::vector<TurnResult> turns;      ///< graded turns (tree nodes), in order
  std::vector<TurnResult> summaries;  ///< summary samples (strategy summary), in order
  int compactions = 0;
  int64_t tokens_saved = 0;           ///< prompt tokens removed by compaction (tokens)
  /// 1-based turn of the first correct verdict, or 0 if none.
  int first_success() const;
  /// True if a graded turn ended in env::Verdict::infra_error (the environment failed; the
  /// rollout stopped there): such a rollout is void, neither rewarded nor counted (rl/scoring.hpp).
  bool infra_error() const;
  /// Generated tokens over graded turns and summaries (tokens).
  int64_t completion_tokens() const;
};

/// One GRPO group: the rollouts of one task.
struct GroupResult {
  size_t task_index = 0;     ///< index into the task list given to run()
  std::vector<RolloutResult> rollouts;
  DcpDecision dcp;           ///< decision after turn 1
  int failed_turn1 = 0;
  int recovered = 0;         ///< failed at turn 1, correct later
  int env_calls_saved = 0;   ///< per turn-1 failure DCP did not expand, the turns its subtree could have
                             ///< taken (T - 1 for a chain; within max_env_calls): an upper bound
};

/// Per-call totals.
struct EngineStats {
  double generation_seconds = 0;
  double env_seconds = 0;
  int64_t env_calls = 0;
  int64_t env_calls_saved = 0;
  int64_t compaction_events = 0;
  int64_t tokens_saved = 0;
};

/// Drives Policy and Grader through the turns of a batch of groups.
class RolloutEngine {
 public:
  RolloutEngine(Policy& policy, Grader& grader, EngineOptions options);
  /// Rolls out `group_size` samples for each task (one group per task). All active rollouts of
  /// a turn are generated in one batched call, then graded in one call. After a turn, each
  /// attempt that failed (or any, with refine_after_success) before turn T gets `branch`
  /// children, round-robin over the group's attempts while the group is under max_env_calls;
  /// after turn 1 DCP decides per group whether any are made. `seed` makes the run repeatable.
  /// Throws what Policy and Grader throw.
  std::vector<GroupResult> run(const std::vector<const env::RuntimeTask*>& tasks, int group_size,
                               uint64_t seed, EngineStats* stats = nullptr);
  const EngineOptions& options() const { return options_; }

 private:
  Policy& policy_;
  Grader& grader_;
  EngineOptions options_;
};

}  // namespace leap::rl
