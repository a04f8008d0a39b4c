#pragma once
// Rewards of finished rollouts (DESIGN.md section 4) and their sources: the rank tournament of
// LEAP (DESIGN.md "Rank-based reward"; no verified arXiv id), the per-turn `speedup` reward and
// the discounted per-turn returns of Kevin (Baronio et al., arXiv:2507.11948, the multi-turn
// reward attribution of its training recipe), `kernelgym` (DESIGN.md's formula, after KernelGym /
// Dr. Kernel; no verified arXiv id) and `binary`, the single-outcome baseline. No torch.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace leap::rl {

/// What the rewards need to know about one finished rollout.
struct RolloutOutcome {
  std::vector<bool> turn_correct;     ///< per turn taken, index t-1
  /// Per turn, reference_ms / candidate_ms; NaN where not correct or not timed. A turn past the
  /// end of this vector counts as NaN (so it may be left empty when timing is off); it must not
  /// be longer than turn_correct (the per-turn rewards throw leap::Error).
  std::vector<double> turn_speedup;
  int64_t completion_tokens = 0;      ///< tokens generated over all turns

  /// k_i, the 1-based turn of the first correct solution; empty = never correct.
  std::optional<int> first_success() const;
  /// Speedup of the first correct turn k_i (the turn the tournament ranks on); NaN if the
  /// rollout never succeeded or that turn's speedup is unknown. A faster kernel found later with
  /// `refine_after_success` does not change it: the rank reward credits the first success.
  double first_success_speedup() const;
};

/// Later keys of the rank tournament and their tie margins (config `reward.*`).
struct RankOptions {
  std::vector<std::string> keys = {"speedup", "tokens"};  ///< in order; each of "speedup" | "tokens"
  double speedup_tie_margin = 0.05;  ///< |a-b| <= margin * max(a,b) is a tie (relative)
  int64_t tokens_tie_margin = 16;    ///< |a-b| <= margin is a tie (tokens)
};

/// Rank-based reward (LEAP, DESIGN.md section 4), one per rollout of the group.
/// Pairwise tournament: i beats j if k_i < k_j (any success beats failure; failures tie with
/// each other). If k_i == k_j and BOTH succeeded, `opts.keys` decide in order, the first key that
/// is not a tie deciding: "speedup" (higher first_success_speedup() wins unless
/// |a-b| <= speedup_tie_margin * max(a,b); a NaN on either side, i.e. timing unknown, is a tie),
/// "tokens" (fewer completion_tokens wins unless |a-b| <= tokens_tie_margin). Failures are never
/// compared on later keys, so a failure never gets a positive reward.
/// r_i = (wins_i - losses_i) / (G - 1), in [-1, 1], summing to 0; G == 1 gives {0}; G == 0 {}.
/// Throws leap::Error on an unknown key (checked even when G <= 1).
std::vector<double> rank_rewards(const std::vector<RolloutOutcome>& group, const RankOptions& opts);

/// Binary reward (DESIGN.md section 4): 1 if the rollout's LAST turn is correct, else 0 (0 for a
/// rollout with no turns).
double binary_reward(const RolloutOutcome& r);

/// Per-turn `speedup` reward (Kevin, DESIGN.md section 4): R_t = 0.3*c_t + speedup_t*c_t, one per
/// turn. A correct turn with a NaN (unknown) speedup gets only the 0.3 correctness term.
/// Throws leap::Error if turn_speedup is longer than turn_correct.
std::vector<double> speedup_turn_rewards(const RolloutOutcome& r);

/// Per-turn `kernelgym` reward (DESIGN.md section 4): R_t = c_t + c_t * min(speedup_t, cap), one
/// per turn. A correct turn with a NaN (unknown) speedup gets only the correctness term 1.
/// Throws leap::Error if turn_speedup is longer than turn_correct.
std::vector<double> kernelgym_turn_rewards(const RolloutOutcome& r, double cap = 3.0);

/// Discounted returns G_t = sum_{k>=t} gamma^(k-t) R_k (DESIGN.md section 4), same length as
/// `rewards`.
std::vector<double> discounted_returns(const std::vector<double>& rewards, double gamma);

}  // namespace leap::rl
