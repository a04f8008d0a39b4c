#pragma once
// The update's batch layout (issue 19, prompt sharing): how a mini-batch of samples becomes the
// rows of one or more forwards. Unshared, each row is [pad.. prompt | completion ..pad]; with
// prompt sharing (rl/prompt_sharing.hpp plans the units), each share unit's common prefix runs
// once and its rows continue it, and a sample whose context + completion start another sample's
// tokens is scored inside that sample's row (model::ScoreSpans).
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "model/transformer.hpp"
#include "rl/update.hpp"

namespace leap::rl {

/// Rows of a batch that run in one forward: [pad.. prompt | completion ..pad]; with prompt
/// sharing, what follows the row's share-unit prefix (at least one token), right padded.
/// A row may score several samples (its own completion and those of samples whose context plus
/// completion starts its tokens: an earlier turn of the rollout, or an identical sample).
struct Part {
  torch::Tensor tokens;          ///< [n, P + C_part] int64
  torch::Tensor attention_mask;  ///< [n, P + C_part] int64
  int64_t completion_len = 0;    ///< C_part
  std::vector<int64_t> rows;     ///< the samples it scores, in output order (positions in idx)
  torch::Tensor prefix_row;      ///< [n] int64: each row's share unit (shared batches; undefined for a
                                 ///< part of rows without a prefix, run as in an unshared batch)
  int64_t prefix_drop = 0;       ///< the part attends to the prefix columns from this one on (the
                                 ///< columns before are left padding for all its rows' units)
  model::ScoreSpans score;       ///< set (score.row defined) when rows score other samples too, and
                                 ///< always with sharing: output k scores row score.row[k] from column
                                 ///< score.start[k] (with sharing, a column of [prefix | row])
  int64_t first_read = 0;        ///< with sharing: the first column of [prefix | row] a span reads
};

/// A mini-batch: one or more parts (rows of very different lengths run apart, so short rows are
/// not padded to the long ones' width), and with prompt sharing the unit prefixes, one row per
/// unit of two or more rows (a unit of one runs its row whole, in a part without a prefix).
struct Batch {
  std::vector<Part> parts;
  torch::Tensor completion_mask;  ///< [B, C] fp32, rows in idx order
  int64_t completion_len = 0;     ///< C, the longest completion (>= 1)
  bool shared = false;            ///< the prefix fields are set
  torch::Tensor prefix_tokens;    ///< [U, Lp] int64, left padded
  torch::Tensor prefix_mask;      ///< [U, Lp] int64
  int64_t prefix_hidden_from = 0; ///< the first prefix column a span reads (Lp: none)
};

/// Tokens of a sample's context + completion.
inline size_t seq_len(const TrainSample& s) { return s.prompt_ids.size() + s.completion_ids.size(); }
/// The k-th token of a sample's context + completion.
inline int64_t seq_token(const TrainSample& s, size_t k) {
  return k < s.prompt_ids.size() ? s.prompt_ids[k] : s.completion_ids[k - s.prompt_ids.size()];
}

/// Whether sample a's context + completion are the first tokens of sample b's.
bool starts_with(const TrainSample& b, const TrainSample& a);

/// Lexicographic order of context + completion (a sequence before the ones it starts).
bool seq_less(const TrainSample& x, const TrainSample& y);

/// Groups positions 0..n-1 of `at` so that every member's context + completion start its
/// group's first (longest) member's tokens: longest first, each joins the first group whose
/// head starts with it. Returns the groups, heads first.
template <typename At>
std::vector<std::vector<size_t>> nest_samples(size_t n, const At& at) {
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return seq_len(at(a)) > seq_len(at(b)); });
  std::vector<std::vector<size_t>> groups;
  for (size_t i : order) {
    bool placed = false;
    for (auto& g : groups)
      if (!at(i).prompt_ids.empty() && starts_with(at(g.front()), at(i))) {
        g.push_back(i);
        placed = true;
        break;
      }
    if (!placed) groups.push_back({i});
  }
  return groups;
}

/// The batch of samples[idx]. With `share`, the prefixes that plan_prompt_sharing finds run once
/// (when some unit has two members or more; otherwise no prefix), and a sample whose context +
/// completion start another sample's tokens is scored in that sample's row instead of its own.
Batch make_batch(const std::vector<TrainSample>& samples, const std::vector<size_t>& idx, int64_t pad_id,
                 torch::Device device, bool share = false);

}  // namespace leap::rl
