#pragma once
// Loss aggregation: per-sample weights that make a batch's token losses one scalar
// (DESIGN.md section 4, "Loss" and "Compaction"). Sources: token_mean is DAPO's token-level
// loss (arXiv:2503.14476, section 3.3); seq_mean_token_mean is GRPO's objective (arXiv:2402.03300,
// section 4.1, eq. 3); constant_length is Dr. GRPO's (arXiv:2503.20783); segment_mean is our rule
// after ATRL (no verified arXiv id): the trainer fixes its weights once per RL step over all
// ranks (rl/update.hpp set_step_segment_weights). No torch; rl/loss.hpp includes this.
#include <cstdint>
#include <string_view>
#include <vector>

namespace leap::rl {

/// How token losses are averaged (config `loss.aggregation`).
enum class Aggregation { token_mean, seq_mean_token_mean, constant_length, segment_mean };

/// "token_mean" | "seq_mean_token_mean" | "constant_length" | "segment_mean". Throws leap::Error
/// naming the bad text and the valid names.
Aggregation parse_aggregation(std::string_view name);

/// Per-sample weights w_i such that loss = sum_i w_i * sum_t l_{i,t} * mask_{i,t} over the WHOLE
/// batch (pass every sample of the optimizer step, across micro-batches and data-parallel ranks,
/// so that splitting the batch gives the same loss as one big batch). sample_tokens[i] = n_i, the
/// masked (trained) tokens of sample i. Samples with n_i == 0 get weight 0 and are not counted:
///  token_mean:          w_i = 1 / T_total, T_total = sum_i n_i;
///  seq_mean_token_mean: w_i = 1 / (n_i * N), N = samples with n_i > 0;
///  constant_length (Dr. GRPO): w_i = 1 / (N * max_len);
///  segment_mean (compaction rule: token mean per segment, then mean over segments):
///    w_i = 1 / (tokens of i's segment * number of distinct segments with tokens), where
///    segment_ids[i] names i's segment (any int64, e.g. rollout * 1000 + segment).
/// segment_ids may be empty except for segment_mean. Throws leap::Error if segment_ids is
/// non-empty and its size differs from sample_tokens (or is empty for segment_mean), if some
/// n_i < 0, or if max_len < 1 for constant_length.
std::vector<double> aggregation_weights(Aggregation kind, const std::vector<int64_t>& sample_tokens,
                                        const std::vector<int64_t>& segment_ids, int64_t max_len);

/// The batch-wide normalizers of aggregation_weights: trained tokens, samples with tokens and
/// distinct segments with tokens. Totals of disjoint parts of a batch add up (a segment never
/// spans data-parallel ranks), so ranks all-reduce (sum) their local totals.
struct AggregationTotals {
  int64_t tokens = 0;    ///< sum of n_i
  int64_t samples = 0;   ///< samples with n_i > 0
  int64_t segments = 0;  ///< distinct segment ids among samples with n_i > 0 (0 unless segment_mean)
};

/// The totals of `sample_tokens` / `segment_ids` (same checks as aggregation_weights).
AggregationTotals aggregation_totals(Aggregation kind, const std::vector<int64_t>& sample_tokens,
                                     const std::vector<int64_t>& segment_ids, int64_t max_len);

/// aggregation_weights for one part of a batch whose batch-wide normalizers are `totals` (the sum
/// over all parts, e.g. all data-parallel ranks); per-segment token counts are taken from this
/// part. With totals == aggregation_totals(this part) it equals aggregation_weights. Throws as
/// aggregation_weights does.
std::vector<double> aggregation_weights(Aggregation kind, const std::vector<int64_t>& sample_tokens,
                                        const std::vector<int64_t>& segment_ids, int64_t max_len,
                                        const AggregationTotals& totals);

}  // namespace leap::rl
