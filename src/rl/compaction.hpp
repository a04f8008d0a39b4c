#pragma once
// Context compaction (DESIGN.md section 4, "Compaction"; after ATRL, the exact rule is our own):
// before a later turn, a rollout whose context is over the prompt budget gets a compact record of
// its earlier turns instead (a deterministic `digest`, or a `summary` the policy writes), which
// starts a new segment. Reasoning between <think> tags never reaches a later context. No torch.
#include <cstdint>
#include <string>
#include <vector>

#include "rl/rollout.hpp"

namespace leap::tasks {
struct TaskSpec;
}

namespace leap::rl {

/// One rollout about to take its next turn (pointers into the engine's state, not owned).
struct PendingTurn {
  const tasks::TaskSpec* spec = nullptr;  ///< its task
  RolloutResult* rollout = nullptr;       ///< graded turns so far; a summary sample is appended to its summaries
  Prompt* context = nullptr;              ///< what the next turn continues; replaced by the record when compacted
  int* segment = nullptr;                 ///< the rollout's 0-based segment; +1 when compacted
  bool compacted = false;                 ///< out: the context is now a compact record
  int parent = -1;                        ///< graded turn it continues (index into rollout->turns); its
                                          ///< ancestors are the attempts a compact record lists
  int summary = -1;                       ///< out: index of the summary written for it in rollout->summaries
};

/// The graded turns from turn 1 down to `parent` (index into rollout.turns), in turn order: the
/// attempts one tree node's context holds (for a chain, every turn so far). Empty for -1. Throws
/// leap::Error on an index outside the rollout.
std::vector<TurnResult> ancestor_path(const RolloutResult& rollout, int parent);

/// Compaction before turn `turn`: every pending rollout whose context is longer than
/// options.max_prompt_tokens (Policy::count_tokens, tokens) gets compact_record() as its context
/// and starts a new segment. With strategy `summary` the policy first writes, in one batched call
/// (options.sampling, at most options.summary_max_tokens tokens, seed mixed from `seed` and
/// `turn`), a summary of each such context after summary_request(); the summary is kept as a
/// trained sample in rollout->summaries (turn = `turn`, the old segment). Adds to `stats`:
/// compaction_events, tokens_saved (prompt tokens removed), generation_seconds. Nothing happens
/// with options.compaction off or turn 1. Throws what Policy throws.
void compact_context(Policy& policy, std::vector<PendingTurn>& pending, int turn, const EngineOptions& options,
                     uint64_t seed, EngineStats& stats);

/// The compact record that replaces a rollout's earlier turns: [system, user] where the user
/// message is the task, then (digest) one digest_line per attempt before the latest (none, and no
/// heading, when the latest is the only one) and the latest attempt without its reasoning, or (summary) "Summary of your earlier attempts:" and `summary`, then
/// the latest verdict's feedback. Throws leap::Error if `turns` is empty.
Prompt compact_record(const tasks::TaskSpec& spec, const std::string& backend, const std::string& strategy,
                      const std::vector<TurnResult>& turns, const std::string& summary);

}  // namespace leap::rl
