// Rewards of finished rollouts (DESIGN.md section 4).
#include "rl/reward.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "util/error.hpp"

namespace leap::rl {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// Speedup of turn t (0-based), NaN past the end of turn_speedup.
double speedup_at(const RolloutOutcome& r, size_t t) {
  return t < r.turn_speedup.size() ? r.turn_speedup[t] : kNaN;
}

void check_lengths(const RolloutOutcome& r) {
  if (r.turn_speedup.size() > r.turn_correct.size())
    throw Error("rollout outcome: " + std::to_string(r.turn_speedup.size()) + " speedups for " +
                std::to_string(r.turn_correct.size()) + " turns");
}

/// +1 if a beats b on this key, -1 if b beats a, 0 for a tie.
int compare_speedup(double a, double b, double margin) {
  if (std::isnan(a) || std::isnan(b)) return 0;
  if (std::abs(a - b) <= margin * std::max(a, b)) return 0;
  return a > b ? 1 : -1;
}

int compare_tokens(int64_t a, int64_t b, int64_t margin) {
  if (std::llabs(a - b) <= margin) return 0;
  return a < b ? 1 : -1;
}

enum class Key { speedup, tokens };

std::vector<Key> parse_keys(const std::vector<std::string>& names) {
  std::vector<Key> keys;
  for (const auto& n : names) {
    if (n == "speedup")
      keys.push_back(Key::speedup);
    else if (n == "tokens")
      keys.push_back(Key::tokens);
    else
      throw Error("unknown rank key '" + n + "' (valid: speedup, tokens)");
  }
  return keys;
}

/// +1 if rollout a beats b, -1 if b beats a, 0 for a tie.
int compare(const RolloutOutcome& a, const RolloutOutcome& b, const std::vector<Key>& keys,
            const RankOptions& opts) {
  std::optional<int> ka = a.first_success(), kb = b.first_success();
  if (!ka && !kb) return 0;
  if (!kb) return 1;
  if (!ka) return -1;
  if (*ka != *kb) return *ka < *kb ? 1 : -1;
  for (Key key : keys) {
    int c = key == Key::speedup
                ? compare_speedup(a.first_success_speedup(), b.first_success_speedup(), opts.speedup_tie_margin)
                : compare_tokens(a.completion_tokens, b.completion_tokens, opts.tokens_tie_margin);
    if (c != 0) return c;
  }
  return 0;
}

}  // namespace

std::optional<int> RolloutOutcome::first_success() const {
  for (size_t t = 0; t < turn_correct.size(); ++t)
    if (turn_correct[t]) return static_cast<int>(t) + 1;
  return std::nullopt;
}

double RolloutOutcome::first_success_speedup() const {
  const auto k = first_success();
  return k ? speedup_at(*this, static_cast<size_t>(*k - 1)) : kNaN;
}

std::vector<double> rank_rewards(const std::vector<RolloutOutcome>& group, const RankOptions& opts) {
  const std::vector<Key> keys = parse_keys(opts.keys);
  const size_t g = group.size();
  std::vector<double> rewards(g, 0.0);
  if (g < 2) return rewards;
  std::vector<int> score(g, 0);  // wins - losses
  for (size_t i = 0; i < g; ++i)
    for (size_t j = i + 1; j < g; ++j) {
      int c = compare(group[i], group[j], keys, opts);
      score[i] += c;
      score[j] -= c;
    }
  for (size_t i = 0; i < g; ++i) rewards[i] = static_cast<double>(score[i]) / static_cast<double>(g - 1);
  return rewards;
}

double binary_reward(const RolloutOutcome& r) {
  return !r.turn_correct.empty() && r.turn_correct.back() ? 1.0 : 0.0;
}

std::vector<double> speedup_turn_rewards(const RolloutOutcome& r) {
  check_lengths(r);
  std::vector<double> out(r.turn_correct.size(), 0.0);
  for (size_t t = 0; t < out.size(); ++t) {
    if (!r.turn_correct[t]) continue;
    double s = speedup_at(r, t);
    out[t] = 0.3 + (std::isnan(s) ? 0.0 : s);
  }
  return out;
}

std::vector<double> kernelgym_turn_rewards(const RolloutOutcome& r, double cap) {
  check_lengths(r);
  std::vector<double> out(r.turn_correct.size(), 0.0);
  for (size_t t = 0; t < out.size(); ++t) {
    if (!r.turn_correct[t]) continue;
    double s = speedup_at(r, t);
    out[t] = 1.0 + (std::isnan(s) ? 0.0 : std::min(s, cap));
  }
  return out;
}

std::vector<double> discounted_returns(const std::vector<double>& rewards, double gamma) {
  std::vector<double> out(rewards.size());
  double acc = 0.0;
  for (size_t t = rewards.size(); t-- > 0;) {
    acc = rewards[t] + gamma * acc;
    out[t] = acc;
  }
  return out;
}

}  // namespace leap::rl
