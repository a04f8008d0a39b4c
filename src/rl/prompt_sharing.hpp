#pragma once
// Prompt sharing in the update (issue 19): which samples of a mini-batch run a common context
// prefix once. Every sample of a GRPO group starts with the same rendered task prompt (turn 1 of
// a group is the same context eight times), so the prefix's forward and backward are done once
// per share unit instead of once per sample.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace leap::rl {

/// Samples (indices into the planner's input) whose prompts start with the same `prefix_len`
/// tokens; 1 <= prefix_len < every member's prompt length (each member keeps at least one
/// prompt token of its own, whose hidden state predicts the first completion token).
struct ShareUnit {
  std::vector<size_t> members;
  size_t prefix_len = 0;
};

/// Partitions the prompts into share units: prompts sorted lexicographically, then cut into
/// runs of consecutive prompts so that the tokens run (each unit's prefix once, plus every
/// member's rest) are fewest (dynamic programming over the cut points; a tie keeps fewer
/// units). A unit of two or more shares its members' common prefix, at least `min_prefix`
/// tokens; a unit of one holds all its tokens but one as its prefix. Every index appears in
/// exactly one unit. Returns an empty plan when some prompt has fewer than 2 tokens (nothing to
/// share; the caller runs the unshared path). The result depends only on the prompts, not on
/// their order (equal prompts are interchangeable). Padding (prefixes of different lengths run
/// as one left-padded batch) is not counted.
std::vector<ShareUnit> plan_prompt_sharing(const std::vector<const std::vector<int64_t>*>& prompts,
                                           size_t min_prefix = 16);

/// Context tokens the plan runs (prefixes once, plus every member's rest) over the tokens the
/// unshared path runs (every prompt whole); 1 for an empty plan. For logs and benches.
double shared_prompt_fraction(const std::vector<const std::vector<int64_t>*>& prompts,
                              const std::vector<ShareUnit>& plan);

}  // namespace leap::rl
