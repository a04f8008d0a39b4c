#pragma once
// Rewards and advantages over debugging trees (config `turns.branch`, `reward.tree`,
// `advantage.kind: sae | sae_projection`). A group's tree holds every graded turn of its G
// rollouts as a node; a failed node is expanded into `branch` feedback-conditioned children.
// Sources:
//  - tree reward propagation: Murphy (Ekbote et al., arXiv:2511.07833, "MaRS" and "MeRS", the
//    retrospective credit assignment of its rollout tree). The paper's exact rule for a node that
//    is itself correct and has children is not known to us; our reading is in
//    propagate_tree_rewards.
//  - staged advantage estimation (SAE): Tree-OPO (Huang, Nguyen, Zimmer, arXiv:2509.09284,
//    section 4 "Staged Advantage Estimation": the heuristic prefix baselines and the constrained
//    projection the paper calls soft SAE). The prefix of a node is the context it was generated
//    from: the task prompt for a turn-1 node, its parent's context, answer and feedback otherwise.
// No torch; every function is a small step an ablation switches between (as verl's core_algos.py).
#include <string_view>
#include <utility>
#include <vector>

namespace leap::rl {

/// One node of a group's debugging tree. Nodes are listed parents first: a node's parent has a
/// smaller index.
struct TreeNode {
  int parent = -1;      ///< index of the node this one continues from; -1 for a turn-1 node (root)
  double reward = 0;    ///< the node's own reward (the reward kind's per-turn reward of this answer)
  bool correct = false; ///< the node's answer was correct
};

/// Config `reward.tree`: none (a node keeps its own reward), max (MaRS), mean (MeRS).
enum class TreeReward { none, max, mean };

/// "none" | "max" | "mean". Throws leap::Error naming the text and the valid names.
TreeReward parse_tree_reward(std::string_view name);

/// Config `advantage.sae.value`: how V(p) summarises the own rewards below a prefix.
enum class SaeValue { expectation, optimistic, pessimistic };

/// "expectation" | "optimistic" | "pessimistic". Throws leap::Error naming the text.
SaeValue parse_sae_value(std::string_view name);

/// Throws leap::Error unless every parent index is -1 or an earlier node.
void check_tree(const std::vector<TreeNode>& nodes);

/// Children of each node, in index order.
std::vector<std::vector<int>> tree_children(const std::vector<TreeNode>& nodes);

/// Tree rewards R_n (Murphy, arXiv:2511.07833): a node without children keeps its own reward r_n;
/// a node with children c gets max(r_n, gamma * agg_c R_c), agg = max (MaRS) or mean (MeRS), so a
/// failed attempt whose feedback led to a success below it is credited, discounted by gamma per
/// level as the chain's returns are (turns.gamma), and a node never earns less than its own
/// answer. `none` returns the own rewards. Computed leaves first. Throws what check_tree throws.
std::vector<double> propagate_tree_rewards(const std::vector<TreeNode>& nodes, TreeReward kind, double gamma);

/// V(p_n) of each node's prefix (Tree-OPO, arXiv:2509.09284, section 4): over the own rewards of
/// every node generated from that prefix or below it (a root: all nodes of the tree; a child of
/// P: every descendant of P), expectation = their mean, optimistic = their max, pessimistic =
/// their min. With the binary reward these are the paper's empirical success rate, "any success
/// below" and "no failure below". Throws what check_tree throws.
std::vector<double> prefix_values(const std::vector<TreeNode>& nodes, SaeValue value);

/// SAE advantages (Tree-OPO, section 4): a'_n = R_n - alpha * V(p_n), then centred over the group
/// (a_n = a'_n - mean a'; no division by the std, as the paper). When every node shares one
/// prefix (one level, no tree) V is a constant and this equals dr_grpo's R_n - mean R.
/// `rewards` are the nodes' (possibly propagated) rewards R_n, one per node. Throws leap::Error on
/// a size mismatch, and what check_tree throws. An empty tree gives {}.
std::vector<double> sae_advantages(const std::vector<TreeNode>& nodes, const std::vector<double>& rewards,
                                   double alpha, SaeValue value);

/// The order constraints of soft SAE: for each parent-child pair whose correctness differs, the
/// pair (hi, lo) asks a_hi >= a_lo with hi the correct one ("a successful child ranks above its
/// failed parent"; with turns.refine_after_success also a correct parent above a failed child).
std::vector<std::pair<int, int>> sae_order_constraints(const std::vector<TreeNode>& nodes);

/// Soft SAE (Tree-OPO, section 4, the constrained projection): the a closest to r0 in the
/// Euclidean norm with sum a = 0, ||a||^2 <= max_sq_norm and a_hi >= a_lo for each pair of
/// `order`. A small convex QP whose feasible set always holds a = 0; solved by Dykstra's
/// alternating projections (Boyle and Dykstra 1986), which converge to the exact projection onto
/// the intersection, to 1e-12 in the max norm or 100000 sweeps. Throws leap::Error if an index of
/// `order` is outside r0, or max_sq_norm < 0.
std::vector<double> project_sae(const std::vector<double>& r0, const std::vector<std::pair<int, int>>& order,
                                double max_sq_norm);

}  // namespace leap::rl
