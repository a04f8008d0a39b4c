// The CPU-time bound's arithmetic (env/cpu_time_bound.hpp), on hand-worked jobs: the candidate's
// own CPU beyond a no-op job, failing closed without a baseline, merging two measurements, and
// the limit a reported time allows.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "env/cpu_time_bound.hpp"

using namespace leap::env;

namespace {

RunOutcome job(double cpu_ms, int runs, Verdict v = Verdict::correct) {
  RunOutcome o;
  o.verdict = v;
  o.job_cpu_ms = cpu_ms;
  for (int r = 0; r < runs; ++r) o.runs.push_back(r);
  return o;
}

}  // namespace

TEST_CASE("env cpu-time bound: own CPU beyond the no-op, failing closed, merging, and the limit") {
  // 10 ms of CPU over 5 runs, against a no-op job of 1 ms over 5 runs: 2.0 - 0.2 = 1.8 ms a run.
  CpuUse u = cpu_use(job(1.0, 5), job(10.0, 5), true, "unused");
  CHECK(u.runs == 5);
  CHECK(u.job_ms == doctest::Approx(2.0));
  CHECK(u.noop_ms == doctest::Approx(0.2));
  CHECK(u.own_ms == doctest::Approx(1.8));
  CHECK(u.why.empty());
  // No baseline: the whole job's CPU counts, and the reason is kept.
  CpuUse closed = cpu_use(job(1.0, 5), job(10.0, 5), false, "unused");
  CHECK(closed.own_ms == doctest::Approx(2.0));
  CHECK(closed.why.find("it did not compile") != std::string::npos);
  CpuUse failed = cpu_use(job(1.0, 5, Verdict::runtime_error), job(10.0, 5), true, "runtime error: boom");
  CHECK(failed.own_ms == doctest::Approx(2.0));
  CHECK(failed.why.find("runtime error: boom") != std::string::npos);
  // The candidate's CPU unreadable: infinite, so always over the bound.
  CpuUse unread = cpu_use(job(1.0, 5), job(-1, 5), true, "unused");
  CHECK(std::isinf(unread.own_ms));
  CHECK(cpu_over(unread, 1000.0, 1));

  // One job between two no-ops: their mean is the no-op's CPU a run (a slow spell that slowed
  // the job slowed the no-ops beside it; a burst in one no-op hides half of itself, not all).
  CpuUse before{1.5, 2.0, 0.5, 5, ""}, after{1.8, 2.0, 0.2, 5, ""};
  CpuUse beside = cpu_use_beside(before, after);
  CHECK(beside.job_ms == doctest::Approx(2.0));
  CHECK(beside.noop_ms == doctest::Approx(0.35));
  CHECK(beside.own_ms == doctest::Approx(1.65));
  CHECK(cpu_use_beside(before, closed).own_ms == doctest::Approx(1.5));  // a side that failed closed gives way
  CHECK(cpu_use_beside(unread, after).own_ms == doctest::Approx(1.8));
  // Merging rounds: the lower own CPU (each against the no-ops beside it), whatever the run counts.
  CpuUse a{1.5, 2.0, 0.5, 5, ""}, b{2.5, 2.7, 0.2, 5, ""};
  CpuUse m = cpu_merge(a, b);
  CHECK(m.job_ms == doctest::Approx(2.0));
  CHECK(m.noop_ms == doctest::Approx(0.5));
  CHECK(m.own_ms == doctest::Approx(1.5));
  CHECK(cpu_merge(b, a).own_ms == doctest::Approx(1.5));
  // Different run counts: the lower own CPU; a failed-closed measurement gives way.
  CpuUse c{1.0, 1.1, 0.1, 9, ""};
  CHECK(cpu_merge(a, c).own_ms == doctest::Approx(1.0));
  CHECK(cpu_merge(closed, a).own_ms == doctest::Approx(1.5));
  CHECK(cpu_merge(a, unread).own_ms == doctest::Approx(1.5));

  // The limit: 1.5 x threads x reported + 2 ms / runs + 0.05 x no-op.
  CpuUse v{0, 0, 0.4, 4, ""};
  CHECK(cpu_limit(v, 1.0, 2) == doctest::Approx(1.5 * 2 * 1.0 + 2.0 / 4 + 0.05 * 0.4));
  v.own_ms = 3.5;
  CHECK_FALSE(cpu_over(v, 1.0, 2));
  v.own_ms = 3.53;
  CHECK(cpu_over(v, 1.0, 2));
  v.runs = 0;  // a job without runs bounds nothing
  CHECK_FALSE(cpu_over(v, 1.0, 2));
}

TEST_CASE("env cpu-time bound: the calling thread is held to its calls' mean reported time, not only the median") {
  // 30 ms over 10 runs, 25 ms of it in the main thread; the no-op 5 ms over 10 runs, all in its
  // main thread: 2.5 ms a run of own CPU, 2.0 of it on the calling thread, 0.5 in another.
  RunOutcome cand = job(30.0, 10), base = job(5.0, 10);
  cand.job_main_cpu_ms = 25.0;
  base.job_main_cpu_ms = 5.0;
  // A spin-join on a loaded machine: 9 calls of 0.2 ms and one of 19 ms that spun while its
  // helper thread was off the CPU. Median 0.2 ms, mean 2.08 ms.
  cand.times_ms = {0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 19.0};
  const CpuUse spin = cpu_use(base, cand, true, "unused");
  CHECK(spin.reported_mean_ms == doctest::Approx(2.08));
  CHECK(spin.other_threads_ms == doctest::Approx(0.5));
  // Over the bound against the median (charged its CPU, 2.5 > 0.3 + 0.2 + 0.025), but the calling
  // thread's 2.0 ms is within 1.5 x 2.08 + 0.2 + 0.025: threads, not a forged time.
  CHECK(cpu_over(spin, 0.2, 1));
  CHECK(cpu_over_by_threads(spin, 0.2, 1));
  CHECK(charged_ms(spin, 1) == doctest::Approx(2.5));
  // The same CPU with every call reported at 0.2 ms (a forged time is short in every call).
  cand.times_ms.assign(10, 0.2);
  const CpuUse forged = cpu_use(base, cand, true, "unused");
  CHECK(forged.reported_mean_ms == doctest::Approx(0.2));
  CHECK(cpu_over(forged, 0.2, 1));
  CHECK_FALSE(cpu_over_by_threads(forged, 0.2, 1));
  // A long reported call without another thread explains nothing: all 2.5 ms on the calling
  // thread, which a mean of 2.08 would allow, is still not "threads".
  cand.times_ms = {0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 19.0};
  cand.job_main_cpu_ms = 30.0;
  const CpuUse alone = cpu_use(base, cand, true, "unused");
  CHECK(alone.other_threads_ms == doctest::Approx(0.0));
  CHECK(cpu_over(alone, 0.2, 1));
  CHECK_FALSE(cpu_over_by_threads(alone, 0.2, 1));
  // No reported times: the median alone, as before.
  cand.times_ms.clear();
  cand.job_main_cpu_ms = 25.0;
  const CpuUse none = cpu_use(base, cand, true, "unused");
  CHECK(none.reported_mean_ms < 0);
  CHECK_FALSE(cpu_over_by_threads(none, 0.2, 1));
}

TEST_CASE("env cpu-time bound: CPU in threads besides the calling one is charged, and alone it is no forged time") {
  // 30 ms over 10 runs, 12 ms of it in the worker's main thread; the no-op job 5 ms over 10 runs,
  // all in its main thread: 3.0 - 0.5 = 2.5 ms a run of own CPU, 1.8 of it in other threads.
  RunOutcome cand = job(30.0, 10), base = job(5.0, 10);
  cand.job_main_cpu_ms = 12.0;
  base.job_main_cpu_ms = 5.0;
  CpuUse u = cpu_use(base, cand, true, "unused");
  CHECK(u.own_ms == doctest::Approx(2.5));
  CHECK(u.other_threads_ms == doctest::Approx(1.8));
  // Reported 1.0 ms a call: the limit is 1.5 + 2/10 + 0.05 x 0.5 = 1.725. Over it in all (2.5),
  // within it on the calling thread alone (0.7): parallel code.
  CHECK(cpu_over(u, 1.0, 1));
  CHECK(cpu_over_by_threads(u, 1.0, 1));
  // The same 2.5 ms with 0.5 of it in other threads: the calling thread's 2.0 ms is over by
  // itself (a forged time), whatever threads run beside it.
  cand.job_main_cpu_ms = 25.0;
  CpuUse forged = cpu_use(base, cand, true, "unused");
  CHECK(forged.other_threads_ms == doctest::Approx(0.5));
  CHECK(cpu_over(forged, 1.0, 1));
  CHECK_FALSE(cpu_over_by_threads(forged, 1.0, 1));
  // Within the bound: nothing to explain. Unknown main-thread CPU: no threads to credit.
  CHECK_FALSE(cpu_over_by_threads(u, 2.0, 1));
  cand.job_main_cpu_ms = -1;
  CpuUse unknown = cpu_use(base, cand, true, "unused");
  CHECK(unknown.other_threads_ms < 0);
  CHECK_FALSE(cpu_over_by_threads(unknown, 1.0, 1));
  // env.cpu.threads 2: 2.5 ms a run is within 1.5 x 2 x 1.0 + ..., but only when the calling
  // thread's own is within one thread's limit: all 2.5 on the calling thread is a forged time.
  CHECK_FALSE(cpu_over(u, 1.0, 2));  // 0.7 on the calling thread, 1.8 in another
  CHECK(cpu_over(forged, 1.0, 2));   // 2.0 on the calling thread
  CHECK_FALSE(cpu_over(unknown, 1.0, 2));  // (unknown split: the total alone)
  // Under threads 2, 4.0 ms a run with 1.5 of it in another thread is over the bound (3.225) and
  // over it by the calling thread's 2.5 alone (1.725 allowed), not by its threads: the other
  // threads' share is taken off once.
  CpuUse both = u;
  both.own_ms = 4.0;
  both.other_threads_ms = 1.5;
  CHECK(cpu_over(both, 1.0, 2));
  CHECK_FALSE(cpu_over_by_threads(both, 1.0, 2));
  // Charged: the CPU over the threads, never less than the calling thread's own.
  CHECK(charged_ms(u, 2) == doctest::Approx(1.25));       // 2.5 / 2 (0.7 on the calling thread)
  CHECK(charged_ms(forged, 2) == doctest::Approx(2.0));   // the calling thread's 2.0, not 1.25
  CHECK(charged_ms(unknown, 2) == doctest::Approx(1.25));
  CHECK(charged_ms(forged, 1) == doctest::Approx(2.5));
  // The worker's own threads (the no-op's beyond its main thread) are not the code's.
  base.job_main_cpu_ms = 3.0;  // 0.2 ms a run in the worker's other threads
  cand.job_main_cpu_ms = 12.0;
  CHECK(cpu_use(base, cand, true, "unused").other_threads_ms == doctest::Approx(1.6));
}

TEST_CASE("env cpu-time bound: a suspicious result is paid at most what its measured CPU a run would earn") {
  CpuUse use;
  use.runs = 100;
  use.own_ms = 0.5;  // the code's own CPU a run
  // A reported 20x on a 10-ms reference, CPU a run 0.5 ms: an honest answer of that CPU earns
  // 20x, so the threshold (10x) is paid.
  CHECK(suspicious_payout(10.0, 10.0, use, 1) == 10.0);
  // The same code with times forged within the bound's factor: CPU 2 ms a run earns 5x honestly.
  use.own_ms = 2.0;
  CHECK(suspicious_payout(10.0, 10.0, use, 1) == doctest::Approx(5.0));
  // Two threads allowed: 2 ms of CPU over 2 threads is 1 ms of wall at best, 10x: the threshold.
  CHECK(suspicious_payout(10.0, 10.0, use, 2) == doctest::Approx(10.0));
  // CPU a run unknown (the cuda backend, no runs, unreadable): the threshold.
  CHECK(suspicious_payout(10.0, 10.0, CpuUse{}, 1) == 10.0);
  use.own_ms = std::numeric_limits<double>::infinity();
  CHECK(suspicious_payout(10.0, 10.0, use, 1) == 10.0);
  use.own_ms = 0;  // within the noise of 100 runs of a no-op of no CPU: 0.02 ms resolved, 500x
  CHECK(suspicious_payout(10.0, 10.0, use, 1) == 10.0);
  // Below the no-op's CPU (a red team's forged 70x whose job and no-op zero-filled a 256-MiB
  // scratch, 8 ms a run): charged what the bound resolves, 2 ms / 23 runs + 5% of the no-op,
  // so a 1-ms reference pays 2.05x, not the threshold.
  use.runs = 23;
  use.noop_ms = 8.0;
  use.own_ms = -2.86;
  CHECK(cpu_resolution(use) == doctest::Approx(2.0 / 23 + 0.4));
  CHECK(suspicious_payout(10.0, 1.0, use, 1) == doctest::Approx(1.0 / (2.0 / 23 + 0.4)));
  CHECK(suspicious_payout(10.0, 1.0, use, 2) == doctest::Approx(2.0 / (2.0 / 23 + 0.4)));
}
