#pragma once
// The one timing schedule of every timing job, candidate or reference, on every backend
// (docs/env.md "Timing"): run t on input set t % sets, every set at least once; first the
// warm-up (`warmup` runs, and at least `warmup_ms` of wall time), cut short once half of the time
// box is spent; then trials (`trials` of them, and until they sum to `min_timed_ms`, at most
// 100 x `trials`), cut short once all of the time box is spent (at least one trial). Around each run, outside the timed region, the
// backend's hooks poison the outputs, rewrite the inputs (env/input_rewrite.hpp), flush caches
// and take the snapshots the verifier checks; the timed region is only the run itself.
#include <cstddef>
#include <functional>
#include <vector>

#include "env/backend.hpp"
#include "env/input_rewrite.hpp"

namespace leap::env {

/// What a backend does around and in each run of a timing job.
struct RunHooks {
  /// Untimed, before run `run` on input set `set`: poison, rewrite, flush. False stops the job
  /// (the hook has recorded the failure in the job's RunOutcome).
  std::function<bool(int run, size_t set)> prepare;
  /// The timed region: runs set `set` once and returns its time in milliseconds, or a negative
  /// value to stop the job (failure recorded by the hook).
  std::function<double(int run, size_t set)> timed;
  /// Optional: called instead of `timed` for the warm-up runs (same contract; its time is not
  /// kept), so a backend can measure what must not perturb the timed runs (per-launch events).
  std::function<double(int run, size_t set)> warmup;
  /// Untimed, after run `run`: the run's snapshots. False stops the job.
  std::function<bool(int run, size_t set)> after;
  /// The time `prepare` takes is left out of the time box (`max_seconds`; warm-up's half of it):
  /// the CPU reference's prepare clones every input, weights included, and on a task with 1 GiB
  /// of weights that spent its box on clones: 1 timed call against the candidate's 11 (a red
  /// team, 2026-12-07).
  bool prepare_outside_box = false;
};

/// Runs `request`'s schedule over `sets` input sets (at least 1) with `hooks`: appends every
/// trial's time to `out.times_ms` and every run's index to `out.runs`. Returns false if a hook
/// stopped the job.
bool run_timing_schedule(const RunRequest& request, size_t sets, const RunHooks& hooks, RunOutcome& out);

/// The plan's tensor index at `position` of set `set` (identity without rotations).
size_t rotated_tensor(const RunRequest& request, size_t set, int position);

/// The targets of `request`'s input rewrites (sizes read from the plan's first set).
std::vector<RewriteTarget> rewrite_targets(const BoundPlan& plan, const RunRequest& request);

/// The block copies before run `run` on set `set`, as plan tensor indices: input position p of
/// a copy is rotated_tensor(request, set, p). Empty for a single-run job or without a seed.
std::vector<BlockCopy> rewrites_for_run(const RunRequest& request, const std::vector<RewriteTarget>& targets, int run);

/// The number of runs a job of `request` makes when its schedule is fixed (no time box, no
/// warmup_ms, no min_timed_ms: warm-up plus trials), else -1.
int fixed_job_runs(const RunRequest& request);

/// Whether a worker running `request` with parent_snapshots reports after run `run`: after every
/// run, or with report_every > 1 after each block's last run and the job's last run.
bool reports_after_run(const RunRequest& request, int run);

/// The run a parent_snapshots worker must report next, having reported runs 0 .. `reported` - 1
/// (the parent's side of reports_after_run): the next run, or with report_every > 1 the last run
/// of the next block (or of the job).
int next_reported_run(const RunRequest& request, int reported);

/// The snapshot of run `run` in `request`, or null: a binary search when the snapshots are sorted
/// by run (the verifier sorts them; a CPU-time check job has thousands), else a scan.
const Snapshot* snapshot_for_run(const RunRequest& request, int run);

}  // namespace leap::env
