// Difficulty-Conditioned Pruning (DESIGN.md section 4).
#include "rl/dcp.hpp"

#include <string>

#include "util/error.hpp"

namespace leap::rl {

DcpDecision dcp_decide(int failed, int group_size, const DcpOptions& opts) {
  if (group_size < 1) throw Error("dcp: group size " + std::to_string(group_size) + " < 1");
  if (failed < 0 || failed > group_size)
    throw Error("dcp: " + std::to_string(failed) + " failed rollouts in a group of " +
                std::to_string(group_size));
  constexpr double tol = 1e-12;
  DcpDecision d;
  d.fail_ratio = static_cast<double>(failed) / static_cast<double>(group_size);
  if (opts.enabled)
    d.expand = d.fail_ratio >= opts.min_fail_ratio - tol && d.fail_ratio <= opts.max_fail_ratio + tol;
  else
    d.expand = failed > 0;
  return d;
}

}  // namespace leap::rl
