#pragma once
// Group-baseline advantage estimators for the non-rank rewards, LEAP turn credit and the DAPO
// all-zero test (DESIGN.md section 4). Sources: GRPO (arXiv:2402.03300, section 4.1.2), Dr. GRPO
// (arXiv:2503.20783, section 3.1), RLOO (arXiv:2402.14740, section 3.2), DAPO dynamic sampling
// (arXiv:2503.14476, section 3.2). No torch.
#include <optional>
#include <string_view>
#include <vector>

namespace leap::rl {

/// Advantage estimator (config `advantage.kind`).
enum class AdvantageKind { grpo, dr_grpo, rloo };

/// "grpo" | "dr_grpo" | "rloo". Throws leap::Error naming the bad text and the valid names.
AdvantageKind parse_advantage_kind(std::string_view name);

/// Group-baseline advantages over scores s_i, one per rollout (DESIGN.md section 4):
///  grpo (GRPO, Shao et al., DeepSeekMath, arXiv:2402.03300, section 4.1.2): (s_i - mean) /
///    (std + std_eps), std the UNBIASED sample std (divides by G - 1), as verl's
///    compute_grpo_outcome_advantage (torch.std); the paper writes std() without saying which;
///  dr_grpo (Dr. GRPO, Liu et al., arXiv:2503.20783, section 3.1): s_i - mean;
///  rloo (RLOO, Ahmadian et al., arXiv:2402.14740, section 3.2): s_i - mean_{j != i} s_j.
/// G == 1 gives {0} for every kind; an empty group gives {}.
std::vector<double> group_advantages(const std::vector<double>& scores, AdvantageKind kind,
                                     double std_eps);

/// Per-turn advantages from per-turn returns returns[i][t] (rollout i, turn t; same shape out):
/// A_{i,t} = G_{i,t} - b_i, scaled by 1 / (std + std_eps) for grpo, where the baseline b_i and
/// std come from the rollout scores s_i = G_{i,1} exactly as in group_advantages (grpo, dr_grpo:
/// b_i = mean s; rloo: b_i = mean_{j != i} s_j). G == 1 gives all zeros (no baseline).
/// With grpo and a group whose scores are all equal (std 0) the advantages are left unscaled
/// (G_{i,t} - mean), so a later-turn return that differs from the baseline is not divided by
/// std_eps alone.
/// Throws leap::Error if a rollout has no turns.
std::vector<std::vector<double>> turn_advantages(const std::vector<std::vector<double>>& returns,
                                                 AdvantageKind kind, double std_eps);

/// Turn credit for the rank reward (LEAP, DESIGN.md section 4), num_turns values: if
/// advantage > 0 and first_success k (1-based) is known, turn t <= k gets gamma^(k-t) * advantage
/// and turns t > k (refinement after success) get advantage; otherwise every turn gets
/// advantage. Throws leap::Error if num_turns < 0 or k is outside [1, num_turns].
std::vector<double> turn_credit(double advantage, std::optional<int> first_success, int num_turns,
                                double gamma);

/// True if every |a| <= 1e-12 (DAPO dynamic sampling drops such groups); true for {}.
bool all_zero(const std::vector<double>& advantages);

}  // namespace leap::rl
