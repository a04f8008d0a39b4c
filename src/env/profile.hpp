#pragma once
// Profiling feedback for a correct answer (config `env.profile_feedback`; after ATRL's cascaded
// compile / correctness / profiling feedback): what one call of the answer moves at least, the
// bandwidth that achieves and its share of a stated peak, so a refinement turn knows whether the
// kernel is near the memory bound. The exact text is in docs/prompts.md. No torch.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "env/task_runtime.hpp"

namespace leap::env {

/// The least memory traffic of one call: every input read once, every output written once
/// (bytes, at the task's sizes for its backend).
struct Traffic {
  int64_t read_bytes = 0;
  int64_t written_bytes = 0;
};

/// Traffic of `task` from its resolved input and output shapes and dtypes. Throws leap::Error on
/// a dtype name the task could not have loaded with.
Traffic task_traffic(const RuntimeTask& task);

/// What the profile line states.
struct ProfileFacts {
  int launches = 1;            ///< launches in the answer's plan (one call runs them all)
  double candidate_ms = 0;     ///< median time of one call (ms)
  double reference_ms = 0;     ///< median time of the reference (ms)
  Traffic traffic;
  double peak_gb_s = 0;        ///< the bandwidth the share is of (GB/s, 1e9 bytes/s); <= 0: no share
  std::string peak_name;       ///< what that peak is, e.g. "single-core reference bandwidth"
  /// Per launch of a multi-launch plan, in order: its kernel and median time (ms), measured in
  /// the untimed warm-up runs (cuda: events between launches). Empty: not measured (a cpu answer
  /// is one call: its time is the call's).
  std::vector<std::pair<std::string, double>> launch_times;
};

/// One line, e.g. "profile: 1 launch per call, 0.812 ms per call (reference 1.02 ms); it moves at
/// least 8.39 MB (4.19 MB of inputs read, 4.19 MB of outputs written): 10.3 GB/s, 103% of the
/// 10 GB/s single-core reference bandwidth". MB are 1e6 bytes. With launch_times, a second
/// line: "per launch (warm-up runs): rows_max 0.212 ms (26.1%), rows_norm 0.6 ms (73.9%)", the
/// shares of the launches' sum.
std::string profile_text(const ProfileFacts& facts);

}  // namespace leap::env
