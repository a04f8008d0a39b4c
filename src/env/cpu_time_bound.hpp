#pragma once
// The CPU-time bound on a cpu candidate's reported times (docs/env.md "Timing"; issue
// "Environment V"): the parent reads a timing job's CPU time from outside the worker
// (RunOutcome::job_cpu_ms) and subtracts what the same job costs with a no-op in place of the
// candidate; what is left per run is the candidate's own CPU time. When it exceeds what the
// reported times allow, those times are not the code's (it ran outside its timed calls, or
// altered the timer): the verifier times the candidate by its CPU time and flags the result.
// Pure arithmetic, no torch; Verifier::evaluate runs the jobs.
#include <string>

#include "env/backend.hpp"

namespace leap::env {

/// The bound's factor: a job may use up to this x threads x its median reported run time per run,
/// beyond the no-op job. Measured here (2026-12-02): an honest job's CPU per run is 0.9-1.05x its
/// mean reported time (naive matmul, 23 runs).
inline constexpr double kCpuBoundFactor = 1.5;
/// ... plus this much CPU per job (ms): the job-to-job noise was about +-0.6 ms (relu, 21 runs).
inline constexpr double kCpuBoundSlackMs = 2.0;
/// ... plus this fraction of the no-op job's CPU a run: what a job costs besides the candidate's
/// calls (poisoning outputs, rewriting inputs, snapshots, a fresh process) is 15-80 us a run on
/// the starter tasks and varies from job to job (+-4% of a check job's CPU here). With the lower
/// of two no-op jobs and a repeat of a check that trips, 0.05 flagged no honest starter solution
/// and 28 of 29 forged 3x in a survey here (2026-12-02); 0.02 found no more and flagged an
/// honest 1.8-us relu under `ctest -j 2`. (Since 2026-12-06 the no-ops beside a check job count
/// by their mean: cpu_use_beside.)
inline constexpr double kCpuNoiseFraction = 0.05;

/// What a CPU-time measurement of one job (or two merged) found.
struct CpuUse {
  double own_ms = -1;  ///< the candidate's own CPU a run (ms): job_ms - noop_ms; +inf when unreadable
  double job_ms = -1;  ///< the candidate job's CPU a run (ms)
  double noop_ms = 0;  ///< the no-op job's CPU a run (ms); 0 when there was none
  int runs = 0;        ///< runs the candidate's job made
  std::string why;     ///< non-empty when the check failed closed (no baseline, CPU unreadable)
  /// Of own_ms, the CPU a run of threads other than the calling one (the job's beyond its main
  /// thread's, less the no-op job's), ms; -1 when unknown. Code that splits its work over threads
  /// is charged all of it (env.cpu.threads is the comparison's budget), and is not a cheat.
  double other_threads_ms = -1;
  /// The mean of the measured job's reported trial times (ms); -1 when it reported none. The
  /// calling thread's CPU inside a timed call cannot exceed the call's wall time, so its CPU a
  /// run is held to this (or the median, if higher) when telling threads from a forged time.
  double reported_mean_ms = -1;
};

/// The candidate's own CPU a run in job `cand`, beyond the no-op job `base` (when `noop_built`
/// and `base` ran with a readable CPU time). Without a baseline the check fails closed: the
/// whole job's CPU a run counts, and `why` says so; with the candidate's CPU unreadable, own_ms
/// is +inf. `base_failure` is what to say when the no-op was built but its job did not run.
CpuUse cpu_use(const RunOutcome& base, const RunOutcome& cand, bool noop_built, const std::string& base_failure);

/// One candidate job measured against the no-op jobs run just before and just after it (each
/// `cpu_use` of that no-op and the same job): the no-op's CPU a run is their mean. A slow spell of
/// the machine (another process's memory traffic: 20.9 -> 27-29 us a no-op run on relu here)
/// slows the no-ops beside the candidate's job as it slows the job, so the no-ops beside it,
/// not the lowest anywhere, say what the job cost besides the code; their mean, not the higher,
/// so that a burst in one no-op hides at most half of itself. A side that failed closed gives
/// way to the other.
CpuUse cpu_use_beside(const CpuUse& before, const CpuUse& after);

/// Two measurements of the same code (check rounds) combined: the lower own CPU a run. Each
/// round is taken against no-op jobs beside it (cpu_use_beside); taking the lowest job against
/// the lowest no-op of any round flagged an honest 1.3-us relu in 2 of 15 quiet evaluations.
/// The no-ops are leap's own code, run after the candidate's worker is gone
/// (Backend::worker_serves_one_job), so the answer cannot slow them. A measurement that failed
/// closed gives way to one that did not.
CpuUse cpu_merge(const CpuUse& a, const CpuUse& b);

/// The most own CPU a run (ms) that `reported` (the median reported run time, ms) allows with
/// `threads` threads: kCpuBoundFactor x threads x reported + kCpuBoundSlackMs / runs +
/// kCpuNoiseFraction x noop_ms.
double cpu_limit(const CpuUse& use, double reported, int threads);

/// True when `use` (of a job that made runs) is over cpu_limit, or not finite; with `threads` > 1
/// and the other threads' share known, also when the calling thread's own CPU alone is over the
/// one-thread limit.
bool cpu_over(const CpuUse& use, double reported, int threads);

/// True when `use` is over the bound only because of its other threads: what the calling thread
/// used alone (own_ms - other_threads_ms) is within cpu_limit of the job's mean reported time
/// (`use.reported_mean_ms`) or of `reported`, whichever is higher. Such code is timed by its CPU
/// time like any over the bound, but it made threads (honest parallel code), not a forged time.
/// The mean, not only the median: a calling thread that spin-waits for a helper thread spins for
/// as long as the helper is off the CPU, inside its timed call; on a loaded machine a few such
/// calls put its CPU a run far above the median call's (a red team's honest spin-wait pool was
/// flagged as a forged time, 2026-12-07), while a forged time is short in every call.
bool cpu_over_by_threads(const CpuUse& use, double reported, int threads);

/// The time a run is charged when its CPU is over the bound (ms): its own CPU spread over
/// `threads` threads, but never less than what its calling thread used alone (one thread's CPU
/// is at most its wall time: a one-thread forgery under env.cpu.threads 2 was paid at half its
/// CPU, 2x an honest answer).
double charged_ms(const CpuUse& use, int threads);

/// The least own CPU a run (ms) the bound tells from noise in `use`: kCpuBoundSlackMs / runs +
/// kCpuNoiseFraction x noop_ms (cpu_limit's terms beside the reported time).
double cpu_resolution(const CpuUse& use);

/// What a suspicious result (a speedup above `threshold` twice) is paid (issue "Environment V",
/// item 5): the threshold, and never more than an honest answer of the code's measured CPU a run
/// would earn, `ref_ms` / (own_ms / threads). Within the bound's factor a forged time is not
/// flagged by the CPU-time bound, so without this a forged 10x+ could still be paid 10x. A CPU a
/// run at or below zero (within the no-op's noise) counts as cpu_resolution: paid the threshold
/// there, a red team's forged 70x with its CPU hidden in a large scratch's noise earned the whole
/// 10x (2026-12-07). The threshold alone when the CPU a run is unknown (no job made runs, unreadable).
double suspicious_payout(double threshold, double ref_ms, const CpuUse& use, int threads);

}  // namespace leap::env
