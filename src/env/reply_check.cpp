#include "env/reply_check.hpp"

#include <algorithm>
#include <cmath>

namespace leap::env {

int max_job_runs(const RunRequest& request, size_t sets) {
  const int trials = std::max(1, request.trials);
  const int max_trials = request.min_timed_ms > 0 ? 100 * trials : trials;
  const int warmup = request.warmup_ms > 0 ? std::max(std::max(0, request.warmup), kMaxTimeWarmupRuns)
                                           : std::max(0, request.warmup);
  return std::max(warmup + max_trials, static_cast<int>(std::max<size_t>(1, sets)));
}

int min_job_runs(const RunRequest& request, size_t sets) {
  const int all_sets = static_cast<int>(std::max<size_t>(1, sets));
  if (request.max_seconds > 0) return all_sets;  // the box may cut warm-up and trials to one
  return std::max(std::max(0, request.warmup) + std::max(1, request.trials), all_sets);
}

std::string check_reply(RunOutcome& reply, const RunRequest& request, size_t launches,
                        const std::vector<Verdict>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), reply.verdict) == allowed.end())
    return "its verdict '" + std::string(to_string(reply.verdict)) + "' is not one this backend's workers give";
  if (reply.failed_launch < -1 || reply.failed_launch >= static_cast<int>(launches))
    return "it names launch " + std::to_string(reply.failed_launch) + " of a plan of " + std::to_string(launches) +
           " launches";
  const size_t sets = std::max<size_t>(1, request.rotations.size());
  const size_t most = static_cast<size_t>(max_job_runs(request, sets));
  if (reply.runs.size() > most)
    return "it lists " + std::to_string(reply.runs.size()) + " runs; the job allows at most " + std::to_string(most);
  for (size_t t = 0; t < reply.runs.size(); ++t)
    if (reply.runs[t] != static_cast<int>(t))
      return "its run list is not 0, 1, 2, ... in order (position " + std::to_string(t) + " holds run " +
             std::to_string(reply.runs[t]) + ")";
  if (reply.times_ms.size() > reply.runs.size())
    return "it reports " + std::to_string(reply.times_ms.size()) + " times for " + std::to_string(reply.runs.size()) +
           " runs";
  for (double ms : reply.times_ms)
    if (!std::isfinite(ms) || ms < 0) return "it reports a time that is negative or not finite";
  // Per-launch profile times are feedback text only: a malformed list is dropped, not a failure.
  bool launch_ms_ok = reply.launch_ms.size() == launches && launches > 1;
  for (double ms : reply.launch_ms) launch_ms_ok = launch_ms_ok && std::isfinite(ms) && ms >= 0 && ms < 1e9;
  if (!launch_ms_ok) reply.launch_ms.clear();
  if (reply.ok()) {
    const size_t least = static_cast<size_t>(min_job_runs(request, sets));
    if (reply.runs.size() < least)
      return "it completed " + std::to_string(reply.runs.size()) + " runs; the job asks for at least " +
             std::to_string(least);
    if (reply.times_ms.empty()) return "it completed without one timed run";
  }
  if (request.worker_sample_slots <= 0 && !reply.sampled_runs.empty()) return "it reports sampled runs the job did not ask for";
  if (request.worker_sample_slots > 0) {
    if (reply.sampled_runs.size() > static_cast<size_t>(request.worker_sample_slots))
      return "it reports " + std::to_string(reply.sampled_runs.size()) + " sampled runs for " +
             std::to_string(request.worker_sample_slots) + " slots";
    std::vector<int> seen;
    for (int r : reply.sampled_runs) {
      if (r < -1 || r >= static_cast<int>(reply.runs.size())) return "it reports a sampled run it did not make";
      if (r >= 0) seen.push_back(r);
    }
    std::sort(seen.begin(), seen.end());
    if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) return "it reports one run in two sample slots";
  }
  if (reply.message.size() > kMaxReplyMessageBytes) {
    const size_t cut = reply.message.size() - kMaxReplyMessageBytes;
    reply.message.resize(kMaxReplyMessageBytes);
    reply.message += " [... " + std::to_string(cut) + " bytes cut]";
  }
  return "";
}

}  // namespace leap::env
