#pragma once
// Difficulty-Conditioned Pruning: which groups go on to debugging turns. Source: LEAP (DESIGN.md
// section 4 "Difficulty-Conditioned Pruning"; DESIGN.md names the paper but not its arXiv id, and
// we have not verified one). Applied in one place, rl/rollout.cpp apply_dcp. No torch.
#include "config/experiment.hpp"

namespace leap::rl {

/// Config `dcp.*` itself (enabled, min_fail_ratio, max_fail_ratio; config/experiment.hpp): a
/// mirror would add nothing.
using DcpOptions = config::DcpConfig;

/// The decision for one group after turn 1.
struct DcpDecision {
  bool expand = false;    ///< the group's failed rollouts get debugging turns
  double fail_ratio = 0;  ///< failed / group_size
};

/// Difficulty-Conditioned Pruning (LEAP, DESIGN.md section 4): f = failed / group_size.
/// Enabled: expand iff min_fail_ratio <= f <= max_fail_ratio, both inclusive with a 1e-12
/// tolerance (so 7/8 == 0.875 counts). Disabled: expand iff failed > 0.
/// Throws leap::Error if group_size < 1 or failed is outside [0, group_size].
DcpDecision dcp_decide(int failed, int group_size, const DcpOptions& opts);

}  // namespace leap::rl
