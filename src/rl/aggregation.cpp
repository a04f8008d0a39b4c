// Loss aggregation weights (DESIGN.md section 4).
#include "rl/aggregation.hpp"

#include <map>
#include <string>

#include "util/error.hpp"

namespace leap::rl {

Aggregation parse_aggregation(std::string_view name) {
  if (name == "token_mean") return Aggregation::token_mean;
  if (name == "seq_mean_token_mean") return Aggregation::seq_mean_token_mean;
  if (name == "constant_length") return Aggregation::constant_length;
  if (name == "segment_mean") return Aggregation::segment_mean;
  throw Error("unknown loss aggregation '" + std::string(name) +
              "' (valid: token_mean, seq_mean_token_mean, constant_length, segment_mean)");
}

namespace {

void check_inputs(Aggregation kind, const std::vector<int64_t>& sample_tokens, const std::vector<int64_t>& segment_ids,
                  int64_t max_len) {
  const size_t n = sample_tokens.size();
  if (!segment_ids.empty() && segment_ids.size() != n)
    throw Error("aggregation_weights: " + std::to_string(segment_ids.size()) + " segment ids for " +
                std::to_string(n) + " samples");
  if (kind == Aggregation::segment_mean && segment_ids.size() != n)
    throw Error("aggregation_weights: segment_mean needs one segment id per sample");
  if (kind == Aggregation::constant_length && max_len < 1)
    throw Error("aggregation_weights: constant_length needs max_len >= 1, got " +
                std::to_string(max_len));
  for (size_t i = 0; i < n; ++i)
    if (sample_tokens[i] < 0)
      throw Error("aggregation_weights: sample " + std::to_string(i) + " has " +
                  std::to_string(sample_tokens[i]) + " tokens");
}

/// Tokens per segment over the samples with tokens.
std::map<int64_t, int64_t> segment_token_counts(Aggregation kind, const std::vector<int64_t>& sample_tokens,
                                                const std::vector<int64_t>& segment_ids) {
  std::map<int64_t, int64_t> out;
  if (kind != Aggregation::segment_mean) return out;
  for (size_t i = 0; i < sample_tokens.size(); ++i)
    if (sample_tokens[i] > 0) out[segment_ids[i]] += sample_tokens[i];
  return out;
}

}  // namespace

AggregationTotals aggregation_totals(Aggregation kind, const std::vector<int64_t>& sample_tokens,
                                     const std::vector<int64_t>& segment_ids, int64_t max_len) {
  check_inputs(kind, sample_tokens, segment_ids, max_len);
  AggregationTotals t;
  for (int64_t n : sample_tokens) {
    t.tokens += n;
    t.samples += n > 0 ? 1 : 0;
  }
  t.segments = static_cast<int64_t>(segment_token_counts(kind, sample_tokens, segment_ids).size());
  return t;
}

std::vector<double> aggregation_weights(Aggregation kind, const std::vector<int64_t>& sample_tokens,
                                        const std::vector<int64_t>& segment_ids, int64_t max_len) {
  return aggregation_weights(kind, sample_tokens, segment_ids, max_len,
                             aggregation_totals(kind, sample_tokens, segment_ids, max_len));
}

std::vector<double> aggregation_weights(Aggregation kind, const std::vector<int64_t>& sample_tokens,
                                        const std::vector<int64_t>& segment_ids, int64_t max_len,
                                        const AggregationTotals& totals) {
  check_inputs(kind, sample_tokens, segment_ids, max_len);
  const size_t n = sample_tokens.size();
  const auto segment_tokens = segment_token_counts(kind, sample_tokens, segment_ids);
  std::vector<double> w(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double ni = static_cast<double>(sample_tokens[i]);
    if (ni == 0) continue;
    switch (kind) {
      case Aggregation::token_mean: w[i] = 1.0 / static_cast<double>(totals.tokens); break;
      case Aggregation::seq_mean_token_mean: w[i] = 1.0 / (ni * static_cast<double>(totals.samples)); break;
      case Aggregation::constant_length:
        w[i] = 1.0 / (static_cast<double>(totals.samples) * static_cast<double>(max_len));
        break;
      case Aggregation::segment_mean:
        w[i] = 1.0 / (static_cast<double>(segment_tokens.at(segment_ids[i])) *
                      static_cast<double>(totals.segments));
        break;
    }
  }
  return w;
}

}  // namespace leap::rl
