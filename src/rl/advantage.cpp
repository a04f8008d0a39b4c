// Group-baseline advantages and turn credit (DESIGN.md section 4).
#include "rl/advantage.hpp"

#include <cmath>
#include <string>
#include <string_view>

#include "util/error.hpp"

namespace leap::rl {

namespace {

/// Baseline b_i of each rollout and the divisor (std + eps for grpo, 1 otherwise).
struct Baseline {
  std::vector<double> b;
  double scale = 1.0;
};

double mean_of(const std::vector<double>& s) {
  double sum = 0.0;
  for (double x : s) sum += x;
  return sum / static_cast<double>(s.size());
}

/// GRPO (arXiv:2402.03300, section 4.1.2): the group mean, divided by the group's std + std_eps.
Baseline grpo_baseline(const std::vector<double>& s, double std_eps) {
  const double mean = mean_of(s);
  double ss = 0.0;
  for (double x : s) ss += (x - mean) * (x - mean);
  // Unbiased (Bessel-corrected) std, as verl's GRPO estimator (torch.std); G >= 2 here.
  // Equal scores (std 0) leave the advantage unscaled: dividing by std_eps alone would blow up
  // any later-turn return that differs from the baseline.
  const double sd = std::sqrt(ss / (static_cast<double>(s.size()) - 1.0));
  return Baseline{std::vector<double>(s.size(), mean), sd > 0 ? sd + std_eps : 1.0};
}

/// Dr. GRPO (arXiv:2503.20783, section 3.1): the group mean, no std division.
Baseline dr_grpo_baseline(const std::vector<double>& s, double) {
  return Baseline{std::vector<double>(s.size(), mean_of(s)), 1.0};
}

/// RLOO (arXiv:2402.14740, section 3.2): the mean of the other rollouts' scores.
Baseline rloo_baseline(const std::vector<double>& s, double) {
  const double g = static_cast<double>(s.size());
  double sum = 0.0;
  for (double x : s) sum += x;
  Baseline out{std::vector<double>(s.size()), 1.0};
  for (size_t i = 0; i < s.size(); ++i) out.b[i] = (sum - s[i]) / (g - 1.0);
  return out;
}

/// The estimators, one row each (config `advantage.kind`; an ablation is a row). Tree-OPO's
/// staged estimators (sae, sae_projection) need the debugging tree: rl/tree_advantage.hpp.
struct Estimator {
  std::string_view name;
  AdvantageKind kind;
  Baseline (*baseline)(const std::vector<double>& scores, double std_eps);
};
constexpr Estimator kEstimators[] = {
    {"grpo", AdvantageKind::grpo, grpo_baseline},
    {"dr_grpo", AdvantageKind::dr_grpo, dr_grpo_baseline},
    {"rloo", AdvantageKind::rloo, rloo_baseline},
};

Baseline baseline(const std::vector<double>& s, AdvantageKind kind, double std_eps) {
  for (const Estimator& e : kEstimators)
    if (e.kind == kind) return e.baseline(s, std_eps);
  throw Error("internal: advantage kind " + std::to_string(static_cast<int>(kind)) + " has no estimator");
}

}  // namespace

AdvantageKind parse_advantage_kind(std::string_view name) {
  std::string valid;
  for (const Estimator& e : kEstimators) {
    if (e.name == name) return e.kind;
    valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  }
  throw Error("unknown advantage kind '" + std::string(name) + "' (valid: " + valid + ")");
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
