// The CPU-time bound on a cpu candidate's reported times (env/evaluation.hpp; the constants and
// arithmetic: env/cpu_time_bound.hpp; docs/env.md "Timing").
//
// On the cpu backend the candidate's code runs in the worker that times it, so it can reach the
// timer (patch the clock, do its work outside its timed calls, rewrite the reported times). What
// it cannot reach is the CPU time the kernel counts for the worker, read from outside
// (RunOutcome::job_cpu_ms). The same job with a no-op in place of the candidate measures what a
// job costs besides the candidate's calls; what the candidate's job used beyond that, per run, is
// the candidate's own CPU time. When it exceeds kCpuBoundFactor x threads x the median reported
// time (plus kCpuBoundSlackMs per job), the reported times are not the code's: the candidate is
// timed by its CPU time instead (divided by the threads it may use) and flagged.
#include <algorithm>
#include <chrono>
#include <memory>
#include <cmath>
#include <future>
#include <mutex>
#include <shared_mutex>

#include "env/evaluation.hpp"

namespace leap::env {

namespace {

/// The bound resolves a forged time only when the candidate's calls make up most of a job's CPU:
/// with 23 runs of a 3-us kernel the slack alone is 87 us a run, so a time forged 5x passed. A
/// timing job whose runs' reported times sum to less than kResolveMs is therefore followed by a
/// check job: the same code for a fixed number of runs whose reported times would sum to
/// kResolveMs (the slack is then at most a quarter of the reported time a run), reported to the
/// parent in blocks, VerifierOptions::check_job_sample of its runs copied by the parent and checked
/// (drawn by the parent and never sent; every one when strict), the exact run count required, and
/// a no-op baseline of the same count (Evaluation::prepare_job). At most kResolveMaxRuns
/// runs, as many as fit kResolveSnapshotBytes of snapshots, and as many as the parent can check
/// with kResolveReferenceMs of reference time.
constexpr double kResolveMs = 4 * kCpuBoundSlackMs;
constexpr int kResolveMaxRuns = 4096;
constexpr size_t kResolveSnapshotBytes = size_t(128) << 20;
constexpr double kResolveReferenceMs = 250;
/// ... and as many as zero-fill at most this much scratch (the parent zero-fills it after every
/// run, RunRequest::parent_zeroes_scratch: an unused 1-GiB scratch made a relu's 4096-run check
/// jobs take 300 s, 2026-12-06). 16 GiB is about 0.6 s of memset here; a kernel that touches its
/// whole scratch at 50 GB/s would need more than 25x this to reach the cap (kResolveMs / 16 GiB
/// is 2 MB of scratch per us of reported time). Where the cap still binds (a scratch far larger
/// than the code can use in its time), the candidate is charged at least its measured CPU a run
/// (Evaluation::cpu_unresolved_): a red team's unused 256-MiB scratch capped the check job at 8
/// runs under the old 2-GiB cap, none ran, and a forged time passed.
constexpr double kResolveScratchBytes = double(uint64_t(16) << 30);
/// How many times a bound that trips is measured again before the code is flagged (each a check
/// job between two no-op jobs, or the timing job's runs again): noise that slows one job (a
/// burst, or a slow spell of the machine) is rarely there for three; a forged time trips all.
constexpr int kMeasureAgain = 2;
/// Check results kept per verifier (CpuUse) before the table starts over.
constexpr size_t kMaxCpuChecks = 100000;

/// A no-op's outputs are never checked, so the parent copies none of its runs' outputs: the
/// snapshot list, sample and store of a `parent_snapshots` request are dropped. The worker's side
/// of the job (what the no-op measures: the runs, the blocks, the reports) is unchanged. The
/// copies into fresh memory were a third of the parent's page faults (bench/env_cpu, 2026-12-07).
void skip_parent_copies(RunRequest& request) {
  if (!request.parent_snapshots) return;  // the worker makes its own copies: part of what is measured
  request.snapshots.clear();
  request.sample = nullptr;
  request.snapshot_store = nullptr;
}

}  // namespace

void Evaluation::prepare_cpu_bound() {
  // What a CPU-time check job measured is a property of the code, its plan and the task (the same
  // program costs the same CPU a run): kept per verifier, so an answer graded again (RL samples
  // repeat) is bounded by it without another check job.
  check_key_ = comp_.artifact.key + '\0' + ans_.plan_yaml + '\0' + task_.spec().name + '\0' + task_.spec().hash + '\0' +
               std::to_string(o_.threads);
}

// The no-op's job runs just before the candidate's (outside the timing window, as a correctness
// run): each candidate timing then follows a job of the same shapes (a timing right after one ran
// measurably faster than a first one, by the state of the memory it leaves). Its launches call
// the worker's own empty kernel (RunRequest::noop: no code loaded, so the worker serves on).
RunOutcome Evaluation::run_baseline(bool strict, int fixed_runs) {
  RunOutcome base;
  if (!reference_on_device_) return base;  // (the cpu backend only)
  std::shared_lock<DeviceLock> shared(v_.device_lock_);  // like a correctness run: never inside a timing window
  return retry_once_on_infra(
      [&](int) {
        TimingJob job = prepare_job(strict, fixed_runs);
        skip_parent_copies(job.request);
        job.request.noop = true;
        return v_.pool_->run(Artifact{}, job.plan, *job.buf, job.request);
      },
      infra_retries_);
}

CpuUse Evaluation::cpu_use_of(const RunOutcome& base, const RunOutcome& cand) const {
  return env::cpu_use(base, cand, reference_on_device_, run_failure_text(base));
}

bool Evaluation::cpu_over(const CpuUse& use, double reported) const {
  return reference_on_device_ && env::cpu_over(use, reported, std::max(1, o_.threads));
}

// `reported` is the timing job's median reported time (what the speedup reads, so what is
// bounded); `use` the CPU of that job or of its CPU-time check job.
void Evaluation::apply_cpu_bound(const CpuUse& use, double reported, double& cand_ms) {
  if (!reference_on_device_ || use.runs <= 0) return;
  cpu_use_ = use;
  const int threads = std::max(1, o_.threads);
  const double own = use.own_ms;
  const std::string& why = use.why;
  ok_.details["cpu_ms_per_run"] = fmt_num(own);
  ok_.details["cpu_noop_ms_per_run"] = fmt_num(use.noop_ms);
  if (!cpu_over(use, reported)) {
    if (!why.empty()) ok_.details["cpu_bound_baseline"] = why;  // closed, but within the bound anyway
    // Too few runs to tell a forged time from noise (the scratch capped the check job): timed by
    // its CPU time where that is the longer, not flagged.
    if (cpu_unresolved_ && std::isfinite(own) && env::charged_ms(use, threads) > cand_ms) {
      cand_ms = env::charged_ms(use, threads);
      cpu_note_ = "\nnote: the code's scratch is too large for enough CPU-time check runs to resolve its reported " +
                  std::string("time (") + fmt_ms(reported) + " ms), so it is timed by its CPU time (" + fmt_ms(cand_ms) +
                  " ms a run); a smaller scratch avoids this";
    }
    return;
  }
  if (std::isfinite(own)) cand_ms = std::max(cand_ms, env::charged_ms(use, threads));
  if (why.empty() && env::cpu_over_by_threads(use, reported, threads)) {
    // Over the bound only by its other threads (the calling thread's own CPU is within it):
    // parallel code, charged all its threads' CPU (the comparison's budget is env.cpu.threads),
    // not flagged as a forged time.
    ok_.details["cpu_bound"] = "the job used " + fmt_ms(own) + " ms of CPU per run, " + fmt_ms(use.other_threads_ms) +
                               " ms of it in threads besides the calling one, against a reported median of " +
                               fmt_ms(reported) + " ms";
    ok_.details["cpu_threads_ms_per_run"] = fmt_num(use.other_threads_ms);
    cpu_note_ = "\nnote: the code used " + fmt_ms(use.other_threads_ms) + " ms of CPU a run in threads besides the " +
                "calling one (" + fmt_ms(own) + " ms in all, against a median of " + fmt_ms(reported) +
                " ms reported by the timed calls); a call is charged the CPU of all its threads (env.cpu.threads is " +
                std::to_string(threads) + "), so it is timed by its CPU time (" + fmt_ms(cand_ms) + " ms)";
    return;
  }
  ok_.suspicious = true;
  if (use.other_threads_ms >= 0) ok_.details["cpu_threads_ms_per_run"] = fmt_num(use.other_threads_ms);
  ok_.details["cpu_bound"] = "the job used " + fmt_ms(own) + " ms of CPU per run against a reported median of " +
                             fmt_ms(reported) + " ms" + why;
  cpu_note_ = "\nnote: the timing job used " + fmt_ms(own) + " ms of CPU time per run beyond a no-op's" + why +
              ", against a median of " + fmt_ms(reported) + " ms reported by the timed calls: the code ran outside " +
              "its timed calls (work done when it is loaded counts too, such as a large table or buffer " +
              "initialised) or altered the timer, so it is timed by its CPU time (" + fmt_ms(cand_ms) + " ms) and flagged";
}

// A CPU-time check job: the code for exactly `n` runs (a sample checked; see prepare_job) between
// two no-op jobs of the same count (their mean counts: cpu_use_beside); `use` gets the code's own
// CPU a run, `seconds` the wall time. A job that makes other than the runs it was asked for
// changed the environment's run loop.
std::optional<EvalResult> Evaluation::cpu_check(bool strict, int n, CpuUse& use, double& seconds) {
  const auto start = std::chrono::steady_clock::now();
  // The check job's buffers are prepared here while the first no-op job runs in its worker (the
  // no-op's CPU time is its worker's, read from outside: the parent's work is not in it).
  std::future<TimingJob> prepared = std::async(std::launch::async, [&] { return prepare_job(strict, n); });
  const RunOutcome base = run_baseline(strict, n);
  TimingJob job;
  retry_once_on_infra(
      [&](int attempt) {
        job = attempt == 0 ? prepared.get() : prepare_job(strict, n);
        std::shared_lock<DeviceLock> shared(v_.device_lock_);
        job.run = v_.pool_->run(comp_.artifact, job.plan, *job.buf, job.request);
        return job.run;
      },
      infra_retries_);
  if (job.run.verdict == Verdict::infra_error)
    return infra(job.run.message + " (twice) [during the CPU-time check runs, after passing the correctness checks]");
  if (job.run.ok()) {  // every run it was asked for, in order: none left unchecked
    bool whole = job.run.runs.size() == static_cast<size_t>(n) &&
                 job.run.times_ms.size() == static_cast<size_t>(job.request.trials);
    for (size_t t = 0; whole && t < job.run.runs.size(); ++t) whole = job.run.runs[t] == static_cast<int>(t);
    if (!whole)
      return fail(Verdict::runtime_error, "the CPU-time check job made " + std::to_string(job.run.runs.size()) +
                                              " of the " + std::to_string(n) +
                                              " runs it was asked for: the code changed the environment's run loop");
  }
  // The second no-op job runs while the parent checks the check job's runs.
  std::future<RunOutcome> second = std::async(std::launch::async, [&] { return run_baseline(strict, n); });
  Timed unused;
  std::optional<EvalResult> bad = verify_job(job, unused);
  const RunOutcome base2 = second.get();
  if (bad) return bad;
  use = cpu_use_beside(cpu_use_of(base, job.run), cpu_use_of(base2, job.run));
  seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return std::nullopt;
}

// CPU-time check jobs (kResolveMs): a short kernel's job is too small for the bound to see a
// forged time, so the same code runs again for enough runs that it does (outside the timing
// window); its CPU, not the timing job's, is bounded. Its times are not used. A bound that trips
// is measured again, up to kMeasureAgain times, and the lowest own CPU a run is bounded
// (cpu_merge): a burst of machine noise in one job (once 7.6 ms of CPU in a 16-ms job here) is
// gone from the next; a forged time trips every one.
std::optional<EvalResult> Evaluation::resolve_cpu_use(bool strict, const TimingJob& job, double reported,
                                                      double ref_ms, CpuUse& use) {
  if (!reference_on_device_) return std::nullopt;
  const int main_runs = static_cast<int>(job.run.runs.size());
  // How many runs a CPU-time check job may make: kResolveMaxRuns, the snapshot memory, the
  // reference time the parent spends checking them.
  double cap = static_cast<double>(kResolveMaxRuns);
  cap = std::min(cap, static_cast<double>(kResolveSnapshotBytes / std::max<size_t>(1, out_bytes_)));
  cap = std::min(cap, std::floor(kResolveReferenceMs / std::max(ref_ms, 1e-6)));
  double scratch_bytes = 0;
  for (const BoundTensor& t : bound_.tensors)
    if (t.role == TensorRole::scratch) scratch_bytes += static_cast<double>(t.bytes());
  const double needed = std::ceil(kResolveMs / std::max(reported, 1e-6));
  // The answer chooses its scratch's size: a cap by it that keeps the check job from resolving
  // the reported time leaves the candidate charged its measured CPU (apply_cpu_bound).
  const bool scratch_caps =
      scratch_bytes > 0 && std::floor(kResolveScratchBytes / scratch_bytes) < std::min(cap, needed);
  if (scratch_bytes > 0) cap = std::min(cap, std::floor(kResolveScratchBytes / scratch_bytes));
  const int max_check_runs = static_cast<int>(std::max(0.0, cap));
  const bool short_job = reported * main_runs < kResolveMs;
  const int n_resolve = static_cast<int>(std::min<double>(needed, max_check_runs));
  bool cached = false;
  int checks = 0;
  double check_s = 0;
  // This evaluation's check marked as running (Verifier::cpu_checks_running_) until it leaves,
  // on every path; the evaluations waiting for it are woken then.
  auto done = [this](const std::string* key) {
    {
      std::lock_guard<std::mutex> lock(v_.cpu_checks_mutex_);
      v_.cpu_checks_running_.erase(*key);
    }
    v_.cpu_checks_done_.notify_all();
  };
  std::unique_ptr<const std::string, decltype(done)> running(nullptr, done);
  if (short_job || cpu_over(use, reported)) {
    std::unique_lock<std::mutex> lock(v_.cpu_checks_mutex_);
    for (;;) {
      // A kept measurement serves only while it has the runs to resolve this reported time (its
      // slack a run, kCpuBoundSlackMs / runs, at most half of it; a check is sized for a quarter,
      // so the same code reporting up to 2x faster by noise keeps it): a check sized for an honest
      // 0.06 ms a call has ~130 runs, 0.015 ms of slack a run, and passed a later grading of the
      // same code that forged 0.011 ms. Else a check job sized for this time runs.
      if (auto it = v_.cpu_checks_.find(check_key_); it != v_.cpu_checks_.end() &&
                                                     (it->second.runs * reported >= kResolveMs / 2 || it->second.runs >= n_resolve)) {
        use = it->second, cached = true;
        break;
      }
      // The same code's check running in another evaluation: its result, once kept, serves here
      // (or, if it keeps none, this evaluation runs its own).
      if (v_.cpu_checks_running_.insert(check_key_).second) {
        running.reset(&check_key_);
        break;
      }
      v_.cpu_checks_done_.wait(lock);
    }
  }
  if (cached) {
    ok_.details["cpu_check_cached"] = "1";
  } else {
    if (short_job && n_resolve > main_runs) {
      if (auto bad = cpu_check(strict, n_resolve, use, check_s)) return bad;
      ++checks;
    }
    const int n_again = checks ? n_resolve : std::min(main_runs, max_check_runs);
    for (int k = 0; k < kMeasureAgain && n_again > 0 && cpu_over(use, reported); ++k) {
      CpuUse again;
      if (auto bad = cpu_check(strict, n_again, again, check_s)) return bad;
      use = cpu_merge(use, again);
      ++checks;
    }
    if (checks) {
      ok_.details["cpu_check_jobs"] = std::to_string(checks);
      ok_.details["cpu_check_s"] = fmt_num(check_s);
      if (use.why.empty() && std::isfinite(use.own_ms)) {
        std::lock_guard<std::mutex> lock(v_.cpu_checks_mutex_);
        if (v_.cpu_checks_.size() >= kMaxCpuChecks) v_.cpu_checks_.clear();
        v_.cpu_checks_[check_key_] = use;
      }
    }
  }
  if (cached || checks) ok_.details["cpu_check_runs"] = std::to_string(use.runs);
  cpu_unresolved_ = scratch_caps && use.runs * reported < kResolveMs;
  if (cpu_unresolved_)
    ok_.details["cpu_check_capped"] = "the scratch (" + fmt_num(scratch_bytes / double(1 << 20)) +
                                      " MiB, zero-filled every run) allows " + std::to_string(max_check_runs) +
                                      " check runs of the " + fmt_num(needed) + " that resolve the reported time";
  return std::nullopt;
}

}  // namespace leap::env
