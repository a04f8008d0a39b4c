// Group-baseline advantages and turn credit (DESIGN.md section 4).
#include "rl/advantage.hpp"

#include <cmath>
#include <string>

#include "util/error.hpp"

namespace leap::rl {

namespace {

/// Baseline b_i of each rollout and the divisor (std + eps for grpo, 1 otherwise).
struct Baseline {
  std::vector<double> b;
  double scale = 1.0;
};

Baseline baseline(const std::vector<double>& s, AdvantageKind kind, double std_eps) {
  const double g = static_cast<double>(s.size());
  double sum = 0.0;
  for (double x : s) sum += x;
  const double mean = sum / g;
  Baseline out;
  out.b.assign(s.size(), mean);
  if (kind == AdvantageKind::rloo) {
    for (size_t i = 0; i < s.size(); ++i) out.b[i] = (sum - s[i]) / (g - 1.0);
  } else if (kind == AdvantageKind::grpo) {
    double ss = 0.0;
    for (double x : s) ss += (x - mean) * (x - mean);
    // Unbiased (Bessel-corrected) std, as verl's GRPO estimator (torch.std); G >= 2 here.
    // Equal scores (std 0) leave the advantage unscaled: dividing by std_eps alone would blow up
    // any later-turn return that differs from the baseline.
    const double sd = std::sqrt(ss / (g - 1.0));
    out.scale = sd > 0 ? sd + std_eps : 1.0;
  }
  return out;
}

}  // namespace

AdvantageKind parse_advantage_kind(std::string_view name) {
  if (name == "grpo") return AdvantageKind::grpo;
  if (name == "dr_grpo") return AdvantageKind::dr_grpo;
  if (name == "rloo") return AdvantageKind::rloo;
  throw Error("unknown advantage kind '" + std::string(name) + "' (valid: grpo, dr_grpo, rloo)");
}

std::vector<double> group_advantages(const std::vector<double>& scores, AdvantageKind kind,
                                     double std_eps) {
  std::vector<double> out(scores.size(), 0.0);
  if (scores.size() < 2) return out;
  Baseline base = baseline(scores, kind, std_eps);
  for (size_t i = 0; i < scores.size(); ++i) out[i] = (scores[i] - base.b[i]) / base.scale;
  return out;
}

std::vector<std::vector<double>> turn_advantages(const std::vector<std::vector<double>>& returns,
                                                 AdvantageKind kind, double std_eps) {
  std::vector<double> scores;
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < returns.size(); ++i) {
    if (returns[i].empty())
      throw Error("turn_advantages: rollout " + std::to_string(i) + " has no turns");
    scores.push_back(returns[i][0]);
    out.emplace_back(returns[i].size(), 0.0);
  }
  if (returns.size() < 2) return out;
  Baseline base = baseline(scores, kind, std_eps);
  for (size_t i = 0; i < returns.size(); ++i)
    for (size_t t = 0; t < returns[i].size(); ++t)
      out[i][t] = (returns[i][t] - base.b[i]) / base.scale;
  return out;
}

std::vector<double> turn_credit(double advantage, std::optional<int> first_success, int num_turns,
                                double gamma) {
  if (num_turns < 0) throw Error("turn_credit: num_turns " + std::to_string(num_turns) + " < 0");
  if (first_success && (*first_success < 1 || *first_success > num_turns))
    throw Error("turn_credit: first success at turn " + std::to_string(*first_success) +
                " outside 1.." + std::to_string(num_turns));
  std::vector<double> out(static_cast<size_t>(num_turns), advantage);
  if (advantage > 0 && first_success) {
    const int k = *first_success;
    for (int t = 1; t <= k; ++t) out[t - 1] = std::pow(gamma, k - t) * advantage;
  }
  return out;
}

bool all_zero(const std::vector<double>& advantages) {
  for (double a : advantages)
    if (!(std::abs(a) <= 1e-12)) return false;  // NaN is not zero
  return true;
}

}  // namespace leap::rl
