#include "rl/scoring.hpp"

#include <cmath>

#include "rl/advantage.hpp"
#include "rl/reward.hpp"
#include "util/error.hpp"

namespace leap::rl {

RolloutOutcome outcome_of(const RolloutResult& rollout, double suspicious_cap) {
  RolloutOutcome o;
  for (const auto& t : rollout.turns) {
    const bool ok = t.result.is_correct();
    o.turn_correct.push_back(ok);
    // A suspicious speedup never earns more than the threshold (the verifier stores it capped;
    // this holds for results from elsewhere too).
    double sp = ok ? t.result.speedup : std::nan("");
    if (ok && t.result.suspicious && !(sp <= suspicious_cap)) sp = suspicious_cap;
    o.turn_speedup.push_back(sp);
  }
  o.completion_tokens = rollout.completion_tokens();
  return o;
}

namespace {

std::vector<ScoredRollout> score_valid(const GroupResult& group, const config::Experiment& exp);

}  // namespace

std::vector<ScoredRollout> score_group(const GroupResult& group, const config::Experiment& exp) {
  bool any_void = false;
  for (const auto& ro : group.rollouts) any_void = any_void || ro.infra_error();
  if (!any_void) return score_valid(group, exp);
  // Void rollouts (an infrastructure error): scored as if they were not in the group; their
  // rewards and advantages are 0, so their tokens carry no gradient.
  GroupResult valid;
  valid.task_index = group.task_index;
  std::vector<size_t> where;
  for (size_t i = 0; i < group.rollouts.size(); ++i)
    if (!group.rollouts[i].infra_error()) {
      valid.rollouts.push_back(group.rollouts[i]);
      where.push_back(i);
    }
  const std::vector<ScoredRollout> scored = score_valid(valid, exp);
  std::vector<ScoredRollout> out(group.rollouts.size());
  for (size_t i = 0; i < group.rollouts.size(); ++i) {
    const size_t n = group.rollouts[i].turns.size();
    out[i].turn_rewards.assign(n, 0.0);
    out[i].turn_returns.assign(n, 0.0);
    out[i].turn_advantages.assign(n, 0.0);
  }
  for (size_t k = 0; k < where.size(); ++k) out[where[k]] = scored[k];
  return out;
}

namespace {

std::vector<ScoredRollout> score_valid(const GroupResult& group, const config::Experiment& exp) {
  const size_t G = group.rollouts.size();
  std::vector<ScoredRollout> out(G);
  std::vector<RolloutOutcome> outcomes;
  for (const auto& ro : group.rollouts) outcomes.push_back(outcome_of(ro, exp.env.timing.suspicious_speedup));
  const double gamma = exp.turns.gamma;
  const double cap = exp.reward.kernelgym_speedup_cap;

  RankOptions ropts;
  ropts.keys = exp.reward.rank_keys;
  ropts.speedup_tie_margin = exp.reward.speedup_tie_margin;
  ropts.tokens_tie_margin = exp.reward.tokens_tie_margin;
  const auto rank = rank_rewards(outcomes, ropts);
  std::vector<std::vector<double>> turn_r_speedup(G), turn_r_kg(G);
  for (size_t i = 0; i < G; ++i) {
    out[i].reward_rank = rank[i];
    out[i].reward_binary = binary_reward(outcomes[i]);
    turn_r_speedup[i] = speedup_turn_rewards(outcomes[i]);
    turn_r_kg[i] = kernelgym_turn_rewards(outcomes[i], cap);
    const auto rs = discounted_returns(turn_r_speedup[i], gamma);
    const auto rk = discounted_returns(turn_r_kg[i], gamma);
    out[i].reward_speedup = rs.empty() ? 0.0 : rs.front();
    out[i].reward_kernelgym = rk.empty() ? 0.0 : rk.front();
  }

  const std::string& kind = exp.reward.kind;
  const AdvantageKind est = parse_advantage_kind(exp.advantage.kind);
  auto place_final = [&](size_t i, double r) {
    const size_t n = group.rollouts[i].turns.size();
    out[i].turn_rewards.assign(n, 0.0);
    if (n) out[i].turn_rewards.back() = r;
    out[i].turn_returns = discounted_returns(out[i].turn_rewards, gamma);
  };
  if (kind == "rank") {
    for (size_t i = 0; i < G; ++i) {
      out[i].reward = rank[i];
      out[i].advantage = rank[i];
      place_final(i, rank[i]);
      const int k = group.rollouts[i].first_success();
      const int n = static_cast<int>(group.rollouts[i].turns.size());
      out[i].turn_advantages =
          turn_credit(rank[i], k > 0 ? std::optional<int>(k) : std::nullopt, n, gamma);
    }
  } else if (kind == "binary") {
    std::vector<double> scores;
    for (size_t i = 0; i < G; ++i) scores.push_back(out[i].reward_binary);
    const auto adv = group_advantages(scores, est, exp.advantage.std_eps);
    for (size_t i = 0; i < G; ++i) {
      out[i].reward = scores[i];
      out[i].advantage = adv[i];
      place_final(i, scores[i]);
      out[i].turn_advantages.assign(group.rollouts[i].turns.size(), adv[i]);
    }
  } else if (kind == "speedup" || kind == "kernelgym") {
    const auto& per_turn = kind == "speedup" ? turn_r_speedup : turn_r_kg;
    std::vector<std::vector<double>> returns(G);
    for (size_t i = 0; i < G; ++i) returns[i] = discounted_returns(per_turn[i], gamma);
    std::vector<double> scores;
    for (size_t i = 0; i < G; ++i) scores.push_back(returns[i].empty() ? 0.0 : returns[i].front());
    const auto adv = turn_advantages(returns, est, exp.advantage.std_eps);
    const auto rollout_adv = group_advantages(scores, est, exp.advantage.std_eps);
    for (size_t i = 0; i < G; ++i) {
      out[i].reward = scores[i];
      out[i].advantage = rollout_adv[i];
      out[i].turn_rewards = per_turn[i];
      out[i].turn_returns = returns[i];
      out[i].turn_advantages = adv[i];
    }
  } else {
    throw Error("reward.kind '" + kind + "' is not one of rank, binary, speedup, kernelgym");
  }
  return out;
}

}  // namespace

}  // namespace leap::rl
