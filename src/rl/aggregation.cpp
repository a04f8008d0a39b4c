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

std::vector<double> aggregation_weights(Aggregation kind, const std::vector<int64_t>& sample_tokens,
                                        const std::vector<int64_t>& segment_ids, int64_t max_len) {
  const size_t n = sample_tokens.size();
  if (!segment_ids.empty() && segment_ids.size() != n)
    throw Error("aggregation_weights: " + std::to_string(segment_ids.size()) + " segment ids for " +
                std::to_string(n) + " samples");
  if (kind == Aggregation::segment_mean && segment_ids.size() != n)
    throw Error("aggregation_weights: segment_mean needs one segment id per sample");
  if (kind == Aggregation::constant_length && max_len < 1)
    throw Error("aggregation_weights: constant_length needs max_len >= 1, got " +
                std::to_string(max_len));
  int64_t total = 0, counted = 0;
  std::map<int64_t, int64_t> segment_tokens;
  for (size_t i = 0; i < n; ++i) {
    if (sample_tokens[i] < 0)
      throw Error("aggregation_weights: sample " + std::to_string(i) + " has " +
                  std::to_string(sample_tokens[i]) + " tokens");
    total += sample_tokens[i];
    if (sample_tokens[i] > 0) {
      ++counted;
      if (kind == Aggregation::segment_mean) segment_tokens[segment_ids[i]] += sample_tokens[i];
    }
  }
  std::vector<double> w(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const double ni = static_cast<double>(sample_tokens[i]);
    if (ni == 0) continue;
    switch (kind) {
      case Aggregation::token_mean: w[i] = 1.0 / static_cast<double>(total); break;
      case Aggregation::seq_mean_token_mean: w[i] = 1.0 / (ni * static_cast<double>(counted)); break;
      case Aggregation::constant_length:
        w[i] = 1.0 / (static_cast<double>(counted) * static_cast<double>(max_len));
        break;
      case Aggregation::segment_mean:
        w[i] = 1.0 / (static_cast<double>(segment_tokens[segment_ids[i]]) *
                      static_cast<double>(segment_tokens.size()));
        break;
    }
  }
  return w;
}

}  // namespace leap::rl
