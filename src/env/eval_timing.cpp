// Step 5 of an evaluation: timing (env/evaluation.hpp; docs/env.md "Timing").
#include <algorithm>
#include <future>
#include <mutex>

#include "env/evaluation.hpp"
#include "env/profile.hpp"

namespace leap::env {

// One exclusive window of the device per measurement: the candidate's timing job, then the
// reference's, back to back; the checks of the candidate's runs come after, outside it. A job that
// ran out of device memory (infra_error) is run once more, on fresh buffers; a second one, or a
// reference that cannot be timed on its device, is an infrastructure error (after the candidate's
// own checks: a wrong timed call is still the answer's verdict).
std::optional<EvalResult> Evaluation::measure(bool strict, Timed& cand, Timed& ref) {
  // The timing job is prepared (outside the window) while the no-op's job runs in its worker.
  std::future<TimingJob> prepared = std::async(std::launch::async, [&] { return prepare_job(strict); });
  const RunOutcome base = run_baseline(strict);
  TimingJob job = prepared.get();
  std::optional<std::string> reference_error;
  {
    std::lock_guard<DeviceLock> window(v_.device_lock_);
    // Worker start-ups (replacements of retired workers, in the background) finish first: the
    // window's measurements do not share the CPU with them.
    v_.pool_->wait_for_starts();
    retry_once_on_infra(
        [&](int attempt) {
          if (attempt) job = prepare_job(strict);
          job.run = v_.pool_->run(comp_.artifact, job.plan, *job.buf, job.request);
          return job.run;
        },
        infra_retries_);
    v_.pool_->wait_for_starts();  // the timing job's worker was replaced in the background
    if (job.run.ok()) reference_error = time_reference(ref);
  }
  if (job.run.verdict == Verdict::infra_error)
    return infra(job.run.message + " (twice) [during the timing runs, after passing the correctness checks]");
  // The timed runs are checked here while the CPU-time check jobs (if any) run in their workers;
  // a wrong timed call is the verdict, before anything the checks found.
  std::future<std::optional<EvalResult>> verified =
      std::async(std::launch::async, [&] { return verify_job(job, cand); });
  const double reported = job.run.times_ms.empty() ? 0 : median(job.run.times_ms);
  CpuUse use;
  std::optional<EvalResult> check_failed;
  if (job.run.ok() && !job.run.times_ms.empty() && !reference_error) {
    use = cpu_use_of(base, job.run);
    check_failed = resolve_cpu_use(strict, job, reported, ref.ms, use);
  }
  if (auto bad = verified.get()) return bad;
  if (reference_error) return infra(*reference_error);
  if (check_failed) return check_failed;
  if (!strict) cand_launch_ms_ = job.run.launch_ms;
  apply_cpu_bound(use, reported, cand.ms);
  return std::nullopt;
}

std::string Evaluation::timing_feedback(const Timed& cand, const Timed& ref, double speedup,
                                        const std::string& note) const {
  std::string profile;
  if (o_.profile_feedback) {
    ProfileFacts facts{static_cast<int>(plan_.launches.size()), cand.ms, ref.ms, task_traffic(task_),
                       o_.peak_gb_s, o_.peak_name, {}};
    if (cand_launch_ms_.size() == plan_.launches.size())
      for (size_t li = 0; li < plan_.launches.size(); ++li)
        facts.launch_times.push_back({plan_.launches[li].kernel, cand_launch_ms_[li]});
    profile = "\n" + profile_text(facts);
  }
  return bound_text("correct on " + std::to_string(o_.seeds) + " seeds; candidate " + fmt_ms(cand.ms) +
                        " ms, reference " + fmt_ms(ref.ms) + " ms, speedup " + fmt_num(speedup) + "x (median of " +
                        std::to_string(cand.n) + " trials" +
                        (ref.n != cand.n ? "; of the reference: " + std::to_string(ref.n) : std::string()) + ")" +
                        note + cpu_note_ + profile,
                    o_.feedback_max_chars);
}

EvalResult Evaluation::time() {
  ok_ = EvalResult::make(Verdict::correct, "", o_.feedback_max_chars);
  plan_timing();
  prepare_cpu_bound();
  Timed cand, ref;
  if (auto bad = measure(false, cand, ref)) return *bad;
  double speedup = ref.ms / std::max(cand.ms, 1e-9);
  ok_.details["trials_candidate"] = std::to_string(cand.n);
  ok_.details["trials_reference"] = std::to_string(ref.n);
  std::string note;
  if (speedup > o_.suspicious_speedup) {
    // Re-measure both sides, the candidate under the strict schedule (fresh poisoned outputs,
    // every run checked); keep the slower candidate and the faster reference.
    Timed cand2, ref2;
    if (auto bad = measure(true, cand2, ref2)) return *bad;
    const double first = speedup;
    cand.ms = std::max(cand.ms, cand2.ms);
    ref.ms = std::min(ref.ms, ref2.ms);  // (both from the same device: a failed GPU reference is an infra_error)
    speedup = ref.ms / std::max(cand.ms, 1e-9);
    if (speedup > o_.suspicious_speedup) {
      // Still above: flagged, and never worth more than the threshold (rewards, rank keys,
      // fast_p and geomean all read the stored, capped speedup; the measured one is in details).
      ok_.suspicious = true;
      ok_.details["suspicious"] = "first measurement " + fmt_num(first) + "x";
      ok_.details["measured_speedup"] = fmt_num(speedup);
      // ... nor more than an honest answer of its measured CPU a run would earn (cpu backend).
      const double paid = suspicious_payout(o_.suspicious_speedup, ref.ms, cpu_use_, std::max(1, o_.threads));
      note = "\nnote: the speedup " + fmt_num(speedup) + "x exceeded " + fmt_num(o_.suspicious_speedup) +
             "x twice; it is recorded as suspicious and counted as " + fmt_num(paid) + "x";
      if (paid < o_.suspicious_speedup)
        note += " (what the code's " + fmt_ms(cpu_use_.own_ms) + " ms of CPU a run would earn)";
      speedup = paid;
    } else {
      note = "\nnote: a first measurement of " + fmt_num(first) + "x was re-measured";
    }
  }
  ok_.details["reference_device"] = reference_device_;
  if (infra_retries_) ok_.details["infra_retries"] = std::to_string(infra_retries_);
  ok_.candidate_ms = cand.ms;
  ok_.reference_ms = ref.ms;
  ok_.speedup = speedup;
  ok_.feedback = timing_feedback(cand, ref, speedup, note);
  return ok_;
}

}  // namespace leap::env
