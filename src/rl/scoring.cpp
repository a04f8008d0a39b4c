#include "rl/scoring.hpp"

#include <cmath>

#include "config/load.hpp"
#include "rl/advantage.hpp"
#include "rl/reward.hpp"
#include "rl/tree_advantage.hpp"
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

namespace {

/// A node's own rewards under each per-turn reward kind, from its one turn.
struct NodeRewards {
  double binary = 0, speedup = 0, kernelgym = 0;
};

NodeRewards node_rewards(const TurnResult& t, const config::Experiment& exp) {
  RolloutResult one;
  one.turns.push_back(t);
  const RolloutOutcome o = outcome_of(one, exp.env.timing.suspicious_speedup);
  return {o.turn_correct.front() ? 1.0 : 0.0, speedup_turn_rewards(o).front(),
          kernelgym_turn_rewards(o, exp.reward.kernelgym_speedup_cap).front()};
}

/// The node reward reward.kind uses (binary, speedup or kernelgym).
double node_reward(const NodeRewards& r, const config::Experiment& exp) {
  const std::string& kind = exp.reward.kind;
  if (kind == "binary") return r.binary;
  if (kind == "speedup") return r.speedup;
  if (kind == "kernelgym") return r.kernelgym;
  throw Error("reward.kind '" + kind + "' is not defined on a debugging tree's nodes (use binary, speedup or kernelgym)");
}

/// Advantages of the tree's nodes under advantage.kind, from their tree rewards R.
std::vector<double> node_advantages(const std::vector<TreeNode>& nodes, const std::vector<double>& R,
                                    const config::Experiment& exp) {
  const std::string& kind = exp.advantage.kind;
  if (kind == "sae" || kind == "sae_projection") {
    const SaeValue v = parse_sae_value(exp.advantage.sae.value);
    auto a = sae_advantages(nodes, R, exp.advantage.sae.alpha, v);
    if (kind == "sae") return a;
    return project_sae(a, sae_order_constraints(nodes), static_cast<double>(nodes.size()));
  }
  return group_advantages(R, parse_advantage_kind(kind), exp.advantage.std_eps);
}

}  // namespace

std::vector<ScoredRollout> score_tree(const GroupResult& group, const config::Experiment& exp) {
  // The group's nodes, rollout by rollout (a parent before its children); void turns left out
  // (the engine never expands one, so no node has a void parent).
  std::vector<TreeNode> nodes;
  std::vector<NodeRewards> node_r;  // [node]
  std::vector<std::vector<int>> where(group.rollouts.size());
  for (size_t i = 0; i < group.rollouts.size(); ++i) {
    const auto& turns = group.rollouts[i].turns;
    for (size_t t = 0; t < turns.size(); ++t) {
      if (turns[t].result.is_infra_error()) {
        where[i].push_back(-1);
        continue;
      }
      const int p = turns[t].parent;
      if (p >= static_cast<int>(t) || (p >= 0 && where[i][static_cast<size_t>(p)] < 0))
        throw Error("score_tree: turn " + std::to_string(t) + " of rollout " + std::to_string(i) +
                    " continues turn " + std::to_string(p) + ", which is not an earlier graded turn");
      where[i].push_back(static_cast<int>(nodes.size()));
      node_r.push_back(node_rewards(turns[t], exp));
      nodes.push_back({p < 0 ? -1 : where[i][static_cast<size_t>(p)], node_reward(node_r.back(), exp), turns[t].result.is_correct()});
    }
  }
  const auto R = propagate_tree_rewards(nodes, parse_tree_reward(exp.reward.tree), exp.turns.gamma);
  const auto A = node_advantages(nodes, R, exp);

  std::vector<ScoredRollout> out(group.rollouts.size());
  for (size_t i = 0; i < group.rollouts.size(); ++i) {
    const auto& turns = group.rollouts[i].turns;
    ScoredRollout& sc = out[i];
    sc.reward_rank = std::nan("");
    for (size_t t = 0; t < turns.size(); ++t) {
      const int n = where[i][t];
      sc.turn_rewards.push_back(n < 0 ? 0.0 : nodes[static_cast<size_t>(n)].reward);
      sc.turn_returns.push_back(n < 0 ? 0.0 : R[static_cast<size_t>(n)]);
      sc.turn_advantages.push_back(n < 0 ? 0.0 : A[static_cast<size_t>(n)]);
      if (n < 0) continue;
      const NodeRewards& r = node_r[static_cast<size_t>(n)];
      sc.reward_binary = std::max(sc.reward_binary, r.binary);
      sc.reward_speedup = std::max(sc.reward_speedup, r.speedup);
      sc.reward_kernelgym = std::max(sc.reward_kernelgym, r.kernelgym);
    }
    // The rollout's reward is its best node's tree reward (with binary: 1 if any node passed, as a
    // chain's last turn says), its advantage the turn-1 node's.
    for (size_t t = 0; t < turns.size(); ++t) sc.reward = t ? std::max(sc.reward, sc.turn_returns[t]) : sc.turn_returns[t];
    if (!turns.empty()) sc.advantage = sc.turn_advantages.front();
  }
  return out;
}

std::vector<ScoredRollout> score_group(const GroupResult& group, const config::Experiment& exp) {
  if (config::tree_scoring(exp)) return score_tree(group, exp);
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

/// What a reward kind reads to set a group's rewards and advantages (score_valid).
struct GroupScores {
  const GroupResult& group;
  const config::Experiment& exp;
  const std::vector<double>& rank;                         ///< [G] rank rewards
  const std::vector<std::vector<double>>& turn_r_speedup;  ///< [G][turn] speedup turn rewards
  const std::vector<std::vector<double>>& turn_r_kg;       ///< [G][turn] KernelGym turn rewards
  AdvantageKind est;
  double gamma;
};

/// A rollout's turn rewards with `r` at its last turn, and their discounted returns.
void place_final(const GroupScores& g, size_t i, double r, ScoredRollout& o) {
  const size_t n = g.group.rollouts[i].turns.size();
  o.turn_rewards.assign(n, 0.0);
  if (n) o.turn_rewards.back() = r;
  o.turn_returns = discounted_returns(o.turn_rewards, g.gamma);
}

/// rank (LEAP): the rank reward is the advantage; turns credited by turn_credit.
void assign_rank(const GroupScores& g, std::vector<ScoredRollout>& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].reward = g.rank[i];
    out[i].advantage = g.rank[i];
    place_final(g, i, g.rank[i], out[i]);
    const int k = g.group.rollouts[i].first_success();
    const int n = static_cast<int>(g.group.rollouts[i].turns.size());
    out[i].turn_advantages = turn_credit(g.rank[i], k > 0 ? std::optional<int>(k) : std::nullopt, n, g.gamma);
  }
}

/// binary: 1 for a correct rollout, group-normalised (advantage.kind); every turn the rollout's advantage.
void assign_binary(const GroupScores& g, std::vector<ScoredRollout>& out) {
  std::vector<double> scores;
  for (const auto& o : out) scores.push_back(o.reward_binary);
  const auto adv = group_advantages(scores, g.est, g.exp.advantage.std_eps);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].reward = scores[i];
    out[i].advantage = adv[i];
    place_final(g, i, scores[i], out[i]);
    out[i].turn_advantages.assign(g.group.rollouts[i].turns.size(), adv[i]);
  }
}

/// speedup / kernelgym: per-turn rewards, their discounted returns normalised per turn.
void assign_turn_returns(const GroupScores& g, const std::vector<std::vector<double>>& per_turn,
                         std::vector<ScoredRollout>& out) {
  const size_t G = out.size();
  std::vector<std::vector<double>> returns(G);
  for (size_t i = 0; i < G; ++i) returns[i] = discounted_returns(per_turn[i], g.gamma);
  std::vector<double> scores;
  for (size_t i = 0; i < G; ++i) scores.push_back(returns[i].empty() ? 0.0 : returns[i].front());
  const auto adv = turn_advantages(returns, g.est, g.exp.advantage.std_eps);
  const auto rollout_adv = group_advantages(scores, g.est, g.exp.advantage.std_eps);
  for (size_t i = 0; i < G; ++i) {
    out[i].reward = scores[i];
    out[i].advantage = rollout_adv[i];
    out[i].turn_rewards = per_turn[i];
    out[i].turn_returns = returns[i];
    out[i].turn_advantages = adv[i];
  }
}
void assign_speedup(const GroupScores& g, std::vector<ScoredRollout>& out) { assign_turn_returns(g, g.turn_r_speedup, out); }
void assign_kernelgym(const GroupScores& g, std::vector<ScoredRollout>& out) { assign_turn_returns(g, g.turn_r_kg, out); }

/// A row of the reward-kind table: an ablation of reward.kind is a row.
struct RewardKind {
  const char* name;
  void (*assign)(const GroupScores&, std::vector<ScoredRollout>&);
};

constexpr RewardKind kRewardKinds[] = {
    {"rank", assign_rank},
    {"binary", assign_binary},
    {"speedup", assign_speedup},
    {"kernelgym", assign_kernelgym},
};

/// The table's row for `name`; throws leap::Error naming the kinds for any other.
const RewardKind& reward_kind(const std::string& name) {
  for (const auto& k : kRewardKinds)
    if (name == k.name) return k;
  throw Error("reward.kind '" + name + "' is not one of rank, binary, speedup, kernelgym");
}

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

  const GroupScores g{group, exp, rank, turn_r_speedup, turn_r_kg, parse_advantage_kind(exp.advantage.kind), gamma};
  reward_kind(exp.reward.kind).assign(g, out);
  return out;
}

}  // namespace

}  // namespace leap::rl
