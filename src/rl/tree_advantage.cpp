// Tree rewards (Murphy) and staged advantages (Tree-OPO); see rl/tree_advantage.hpp.
#include "rl/tree_advantage.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "util/error.hpp"

namespace leap::rl {

TreeReward parse_tree_reward(std::string_view name) {
  if (name == "none") return TreeReward::none;
  if (name == "max") return TreeReward::max;
  if (name == "mean") return TreeReward::mean;
  throw Error("unknown tree reward '" + std::string(name) + "' (valid: none, max, mean)");
}

SaeValue parse_sae_value(std::string_view name) {
  if (name == "expectation") return SaeValue::expectation;
  if (name == "optimistic") return SaeValue::optimistic;
  if (name == "pessimistic") return SaeValue::pessimistic;
  throw Error("unknown SAE value '" + std::string(name) + "' (valid: expectation, optimistic, pessimistic)");
}

void check_tree(const std::vector<TreeNode>& nodes) {
  for (size_t n = 0; n < nodes.size(); ++n) {
    const int p = nodes[n].parent;
    if (p < -1 || p >= static_cast<int>(n))
      throw Error("debugging tree: node " + std::to_string(n) + " has parent " + std::to_string(p) +
                  " (a parent must be an earlier node, or -1 for a turn-1 node)");
  }
}

std::vector<std::vector<int>> tree_children(const std::vector<TreeNode>& nodes) {
  check_tree(nodes);
  std::vector<std::vector<int>> children(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n)
    if (nodes[n].parent >= 0) children[static_cast<size_t>(nodes[n].parent)].push_back(static_cast<int>(n));
  return children;
}

std::vector<double> propagate_tree_rewards(const std::vector<TreeNode>& nodes, TreeReward kind, double gamma) {
  const auto children = tree_children(nodes);
  std::vector<double> R(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) R[n] = nodes[n].reward;
  if (kind == TreeReward::none) return R;
  // Children have larger indices than their parent: walking backwards finishes every subtree first.
  for (size_t k = nodes.size(); k-- > 0;) {
    const auto& c = children[k];
    if (c.empty()) continue;
    double agg = kind == TreeReward::max ? -HUGE_VAL : 0.0;
    for (int i : c) agg = kind == TreeReward::max ? std::max(agg, R[static_cast<size_t>(i)]) : agg + R[static_cast<size_t>(i)];
    if (kind == TreeReward::mean) agg /= static_cast<double>(c.size());
    R[k] = std::max(nodes[k].reward, gamma * agg);
  }
  return R;
}

namespace {

/// Count, sum, min and max of own rewards over a set of nodes.
struct Summary {
  double n = 0, sum = 0, lo = HUGE_VAL, hi = -HUGE_VAL;
  void add(double r) { n += 1, sum += r, lo = std::min(lo, r), hi = std::max(hi, r); }
  void add(const Summary& s) { n += s.n, sum += s.sum, lo = std::min(lo, s.lo), hi = std::max(hi, s.hi); }
  double value(SaeValue v) const {
    if (n == 0) return 0.0;
    if (v == SaeValue::optimistic) return hi;
    if (v == SaeValue::pessimistic) return lo;
    return sum / n;
  }
};

}  // namespace

std::vector<double> prefix_values(const std::vector<TreeNode>& nodes, SaeValue value) {
  const auto children = tree_children(nodes);
  // below[n]: the own rewards of n's descendants (n excluded); subtree = n and below.
  std::vector<Summary> below(nodes.size());
  Summary all;
  for (size_t k = nodes.size(); k-- > 0;) {
    for (int c : children[k]) {
      below[k].add(nodes[static_cast<size_t>(c)].reward);
      below[k].add(below[static_cast<size_t>(c)]);
    }
    all.add(nodes[k].reward);
  }
  std::vector<double> V(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    const int p = nodes[n].parent;
    V[n] = p < 0 ? all.value(value) : below[static_cast<size_t>(p)].value(value);
  }
  return V;
}

std::vector<double> sae_advantages(const std::vector<TreeNode>& nodes, const std::vector<double>& rewards,
                                   double alpha, SaeValue value) {
  if (rewards.size() != nodes.size())
    throw Error("sae_advantages: " + std::to_string(rewards.size()) + " rewards for " + std::to_string(nodes.size()) + " nodes");
  if (nodes.empty()) return {};
  const auto V = prefix_values(nodes, value);
  std::vector<double> a(nodes.size());
  double mean = 0;
  for (size_t n = 0; n < nodes.size(); ++n) a[n] = rewards[n] - alpha * V[n], mean += a[n];
  mean /= static_cast<double>(nodes.size());
  for (double& x : a) x -= mean;
  return a;
}

std::vector<std::pair<int, int>> sae_order_constraints(const std::vector<TreeNode>& nodes) {
  check_tree(nodes);
  std::vector<std::pair<int, int>> order;
  for (size_t n = 0; n < nodes.size(); ++n) {
    const int p = nodes[n].parent;
    if (p < 0 || nodes[n].correct == nodes[static_cast<size_t>(p)].correct) continue;
    if (nodes[n].correct) order.emplace_back(static_cast<int>(n), p);
    else order.emplace_back(p, static_cast<int>(n));
  }
  return order;
}

namespace {

/// Projection onto {sum x = 0}.
void project_zero_sum(std::vector<double>& x) {
  double mean = 0;
  for (double v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (double& v : x) v -= mean;
}

/// Projection onto {||x||^2 <= r2}.
void project_ball(std::vector<double>& x, double r2) {
  double sq = 0;
  for (double v : x) sq += v * v;
  if (sq <= r2) return;
  const double s = std::sqrt(r2 / sq);
  for (double& v : x) v *= s;
}

/// Projection onto {x_hi >= x_lo}: a violated pair moves to its midpoint.
void project_order(std::vector<double>& x, std::pair<int, int> c) {
  double& hi = x[static_cast<size_t>(c.first)];
  double& lo = x[static_cast<size_t>(c.second)];
  if (hi >= lo) return;
  const double mid = 0.5 * (hi + lo);
  hi = mid, lo = mid;
}

}  // namespace

std::vector<double> project_sae(const std::vector<double>& r0, const std::vector<std::pair<int, int>>& order,
                                double max_sq_norm) {
  if (!(max_sq_norm >= 0)) throw Error("project_sae: max_sq_norm " + std::to_string(max_sq_norm) + " < 0");
  const int n = static_cast<int>(r0.size());
  for (const auto& [hi, lo] : order)
    if (hi < 0 || hi >= n || lo < 0 || lo >= n || hi == lo)
      throw Error("project_sae: order constraint (" + std::to_string(hi) + ", " + std::to_string(lo) +
                  ") outside the " + std::to_string(n) + " advantages");
  if (r0.empty()) return {};
  // Dykstra: one correction vector per set; each sweep projects x + p_k onto set k in turn.
  const size_t sets = 2 + order.size();
  std::vector<std::vector<double>> p(sets, std::vector<double>(r0.size(), 0.0));
  std::vector<double> x = r0, y;
  for (int sweep = 0; sweep < 100000; ++sweep) {
    double change = 0;
    for (size_t k = 0; k < sets; ++k) {
      y = x;
      for (size_t i = 0; i < y.size(); ++i) y[i] += p[k][i];
      const std::vector<double> in = y;
      if (k == 0) project_zero_sum(y);
      else if (k == 1) project_ball(y, max_sq_norm);
      else project_order(y, order[k - 2]);
      for (size_t i = 0; i < y.size(); ++i) {
        p[k][i] = in[i] - y[i];
        change = std::max(change, std::abs(y[i] - x[i]));
      }
      x.swap(y);
    }
    if (change <= 1e-12) break;
  }
  return x;
}

}  // namespace leap::rl
