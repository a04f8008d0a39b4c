#include "env/timing_schedule.hpp"

#include <algorithm>
#include <chrono>

namespace leap::env {

bool run_timing_schedule(const RunRequest& request, size_t sets, const RunHooks& hooks, RunOutcome& out) {
  using Clock = std::chrono::steady_clock;
  sets = std::max<size_t>(1, sets);
  const int warmup = std::max(0, request.warmup);
  const int trials = std::max(1, request.trials);
  const int max_trials = request.min_timed_ms > 0 ? 100 * trials : trials;
  const auto start = Clock::now();
  double outside_s = 0;  // prepare's time, with hooks.prepare_outside_box
  auto elapsed_s = [&] { return std::chrono::duration<double>(Clock::now() - start).count() - outside_s; };
  const bool boxed = request.max_seconds > 0;
  int warm_done = 0, timed = 0;
  double timed_ms = 0;
  for (int t = 0;; ++t) {
    const bool all_sets_ran = static_cast<size_t>(t) >= sets;  // every set runs at least once
    // Warm-up: `warmup` runs and at least `warmup_ms`, cut short at half of the time box.
    bool warming = warm_done < warmup || (request.warmup_ms > 0 && elapsed_s() * 1000 < request.warmup_ms);
    if (warming && boxed && all_sets_ran && elapsed_s() > request.max_seconds / 2) warming = false;
    if (!warming) {
      const bool enough = timed >= trials && (request.min_timed_ms <= 0 || timed_ms >= request.min_timed_ms);
      if (all_sets_ran && (enough || timed >= max_trials)) break;
      if (all_sets_ran && timed >= 1 && boxed && elapsed_s() > request.max_seconds) break;  // time box spent
    }
    const size_t set = static_cast<size_t>(t) % sets;
    if (hooks.prepare) {
      const auto before = Clock::now();
      if (!hooks.prepare(t, set)) return false;
      if (hooks.prepare_outside_box) outside_s += std::chrono::duration<double>(Clock::now() - before).count();
    }
    const double ms = warming && hooks.warmup ? hooks.warmup(t, set) : hooks.timed(t, set);
    if (ms < 0) return false;
    out.runs.push_back(t);
    if (warming) {
      ++warm_done;
    } else {
      out.times_ms.push_back(ms);
      ++timed;
      timed_ms += ms;
    }
    if (hooks.after && !hooks.after(t, set)) return false;
  }
  return true;
}

size_t rotated_tensor(const RunRequest& request, size_t set, int position) {
  if (request.rotations.empty()) return static_cast<size_t>(position);
  return static_cast<size_t>(request.rotations.at(set % request.rotations.size()).at(static_cast<size_t>(position)));
}

std::vector<RewriteTarget> rewrite_targets(const BoundPlan& plan, const RunRequest& request) {
  std::vector<RewriteTarget> out;
  if (request.rewrite_seed == 0) return out;
  for (int p : request.rewrite_inputs) {
    const BoundTensor& t = plan.tensors.at(rotated_tensor(request, 0, p));
    const int64_t n = t.numel();
    if (n < 2) continue;
    out.push_back(RewriteTarget{p, static_cast<size_t>(n), t.bytes() / static_cast<size_t>(n)});
  }
  return out;
}

std::vector<BlockCopy> rewrites_for_run(const RunRequest& request, const std::vector<RewriteTarget>& targets, int run) {
  if (request.rewrite_seed == 0 || targets.empty()) return {};
  std::vector<BlockCopy> copies = input_rewrites(request.rewrite_seed, run, targets);
  const size_t sets = std::max<size_t>(1, request.rotations.size());
  const size_t set = static_cast<size_t>(run) % sets;
  for (BlockCopy& c : copies) c.input = static_cast<int>(rotated_tensor(request, set, c.input));
  return copies;
}

int fixed_job_runs(const RunRequest& request) {
  if (request.max_seconds > 0 || request.warmup_ms > 0 || request.min_timed_ms > 0) return -1;
  return std::max(0, request.warmup) + std::max(1, request.trials);
}

bool reports_after_run(const RunRequest& request, int run) {
  if (request.report_every <= 1) return true;
  return (run + 1) % request.report_every == 0 || run + 1 == fixed_job_runs(request);
}

int next_reported_run(const RunRequest& request, int reported) {
  if (request.report_every <= 1) return reported;
  const int total = fixed_job_runs(request);
  const int end = reported + request.report_every;
  return (total > 0 ? std::min(end, total) : end) - 1;
}

const Snapshot* snapshot_for_run(const RunRequest& request, int run) {
  // Sorted by run (the verifier's order): a binary search; else (any other order) a scan.
  const auto& v = request.snapshots;
  auto it = std::lower_bound(v.begin(), v.end(), run, [](const Snapshot& s, int r) { return s.run < r; });
  if (it != v.end() && it->run == run) return &*it;
  for (const Snapshot& s : request.snapshots)
    if (s.run == run) return &s;
  return nullptr;
}

}  // namespace leap::env
