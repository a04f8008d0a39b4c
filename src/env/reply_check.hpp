#pragma once
// A worker's reply is untrusted input. The worker runs the answer's code in its own process
// (cpu backend), so that code can find the job socket and write a reply of its own before the
// worker does: any verdict, any run list, any times. The parent checks every reply against what
// the job asked for before it uses one field of it (issue "Environment V", docs/env.md "Sandbox").
#include <cstddef>
#include <string>
#include <vector>

#include "env/backend.hpp"

namespace leap::env {

/// Longest `message` kept from a worker's reply, in bytes: longer text is cut with a note (the
/// verifier bounds feedback again, env.feedback_max_chars).
inline constexpr size_t kMaxReplyMessageBytes = size_t(16) << 10;

/// Warm-up runs a job with `RunRequest::warmup_ms` > 0 may make (warm-up then lasts a wall time,
/// so its count depends on the kernel): a bound on the run list of such a job.
inline constexpr int kMaxTimeWarmupRuns = 1 << 20;

/// The most runs `request` allows a job to make over `sets` rotated input sets: every set at
/// least once, `warmup` runs (or kMaxTimeWarmupRuns with `warmup_ms`), and `trials` timed runs
/// (100 x `trials` with `min_timed_ms`), as env/timing_schedule.cpp runs them.
int max_job_runs(const RunRequest& request, size_t sets);

/// The fewest runs a job that ran to completion makes: every set once, `warmup` and `trials`,
/// unless `request` has a time box (`max_seconds`), which may cut warm-up and trials short.
int min_job_runs(const RunRequest& request, size_t sets);

/// Checks `reply` (decoded from a worker) against the job it answers: its verdict is one the
/// backend's workers can give (`allowed`: Backend::worker_verdicts), its failed launch one of the
/// plan's `launches` (or -1), its run list exactly 0, 1, ..., n-1 with n within
/// [min_job_runs, max_job_runs] for a completed job (at most max_job_runs otherwise), its times
/// finite, non-negative and at most one per run (at least one for a completed job). Cuts an overlong
/// message to kMaxReplyMessageBytes, and clears a `launch_ms` list that is not one finite,
/// non-negative time per launch of a multi-launch plan (it is feedback text only). Returns "" when the reply may be used, else what is wrong with it.
std::string check_reply(RunOutcome& reply, const RunRequest& request, size_t launches,
                        const std::vector<Verdict>& allowed);

}  // namespace leap::env
