// The CPU-time bound's arithmetic; see env/cpu_time_bound.hpp.
#include "env/cpu_time_bound.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace leap::env {

CpuUse cpu_use(const RunOutcome& base, const RunOutcome& cand, bool noop_built, const std::string& base_failure) {
  CpuUse use;
  use.runs = static_cast<int>(cand.runs.size());
  use.own_ms = cand.job_cpu_ms >= 0 && use.runs > 0 ? cand.job_cpu_ms / use.runs : -1;
  use.job_ms = use.own_ms;
  double sum = 0;
  int timed = 0;
  for (double t : cand.times_ms)
    if (std::isfinite(t) && t >= 0) sum += t, ++timed;
  if (timed > 0) use.reported_mean_ms = sum / timed;
  if (use.own_ms >= 0 && cand.job_main_cpu_ms >= 0)
    use.other_threads_ms = std::max(0.0, cand.job_cpu_ms - cand.job_main_cpu_ms) / use.runs;
  if (use.own_ms >= 0) {
    if (noop_built && base.ok() && base.job_cpu_ms >= 0 && !base.runs.empty()) {
      use.noop_ms = base.job_cpu_ms / static_cast<double>(base.runs.size());
      use.own_ms -= use.noop_ms;
      if (use.other_threads_ms >= 0 && base.job_main_cpu_ms >= 0)  // the worker's own threads, if any
        use.other_threads_ms = std::max(0.0, use.other_threads_ms - std::max(0.0, base.job_cpu_ms - base.job_main_cpu_ms) /
                                                                         static_cast<double>(base.runs.size()));
    } else {
      use.why = " (no no-op baseline: " + (noop_built ? base_failure : std::string("it did not compile")) + ")";
    }
  } else {
    use.why = " (its CPU time could not be read)";
    use.own_ms = std::numeric_limits<double>::infinity();
  }
  return use;
}

CpuUse cpu_use_beside(const CpuUse& before, const CpuUse& after) {
  if (!after.why.empty() || !std::isfinite(after.own_ms)) return before;
  if (!before.why.empty() || !std::isfinite(before.own_ms)) return after;
  CpuUse m = before;
  m.noop_ms = 0.5 * (before.noop_ms + after.noop_ms);
  m.own_ms = m.job_ms - m.noop_ms;
  return m;
}

CpuUse cpu_merge(const CpuUse& a, const CpuUse& b) {
  if (!b.why.empty() || !std::isfinite(b.own_ms)) return a;
  if (!a.why.empty() || !std::isfinite(a.own_ms)) return b;
  return b.own_ms < a.own_ms ? b : a;
}

double cpu_limit(const CpuUse& use, double reported, int threads) {
  return kCpuBoundFactor * std::max(1, threads) * reported + kCpuBoundSlackMs / std::max(1, use.runs) +
         kCpuNoiseFraction * use.noop_ms;
}

namespace {

/// `use` as if only its calling thread had run: its other threads' CPU taken off, none left.
CpuUse calling_thread(const CpuUse& use) {
  CpuUse calling = use;
  calling.own_ms = use.own_ms - std::max(0.0, use.other_threads_ms);
  calling.other_threads_ms = 0;
  return calling;
}

}  // namespace

bool cpu_over(const CpuUse& use, double reported, int threads) {
  if (use.runs <= 0) return false;
  if (!(std::isfinite(use.own_ms) && use.own_ms <= cpu_limit(use, reported, threads))) return true;
  // With more than one thread allowed, the calling thread alone is still one thread: its own CPU
  // within the one-thread bound (a red team forged 2.9-3x on one thread under env.cpu.threads 2:
  // 0.7-0.8x against an honest 0.24x, unflagged).
  if (threads > 1 && use.other_threads_ms >= 0) return cpu_over(calling_thread(use), reported, 1);
  return false;
}

bool cpu_over_by_threads(const CpuUse& use, double reported, int threads) {
  if (!cpu_over(use, reported, threads) || !std::isfinite(use.own_ms) || !(use.other_threads_ms > 0)) return false;
  return !cpu_over(calling_thread(use), std::max(reported, use.reported_mean_ms), threads);
}

double charged_ms(const CpuUse& use, int threads) {
  double ms = use.own_ms / static_cast<double>(std::max(1, threads));
  if (use.other_threads_ms >= 0) ms = std::max(ms, calling_thread(use).own_ms);
  return ms;
}

double cpu_resolution(const CpuUse& use) {
  return kCpuBoundSlackMs / std::max(1, use.runs) + kCpuNoiseFraction * use.noop_ms;
}

double suspicious_payout(double threshold, double ref_ms, const CpuUse& use, int threads) {
  if (use.runs <= 0 || !std::isfinite(use.own_ms)) return threshold;
  // At or below the no-op's CPU (the measurement's noise): charged what the bound resolves.
  const double cpu_ms = use.own_ms > 0 ? charged_ms(use, threads) : cpu_resolution(use) / std::max(1, threads);
  return std::min(threshold, ref_ms / cpu_ms);
}

}  // namespace leap::env
