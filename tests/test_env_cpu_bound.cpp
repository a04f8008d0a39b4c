// The CPU-time bound on a cpu candidate's reported times, for short kernels (docs/env.md "Timing",
// "The worker's CPU time bounds the reported times"). Code loaded into the worker can reach the
// worker's timer (a saved start time on the stack, the timer's own system call site, a hook on
// the worker's memcpy: docs/env.md "Known limits"), so these tests forge the reported times the
// way such code would, in the worker, with a test backend whose worker divides every reported
// time by a factor (its workers are forked, so the settings live in shared memory). What must
// hold: a few-microsecond kernel whose times are forged 5x is flagged and timed by its CPU time,
// the same kernel reported honestly is not, and a job that makes fewer runs than asked fails.
#include <doctest/doctest.h>


#include <algorithm>
#include <atomic>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <cstdlib>
#include <random>
#include <vector>

#include "env/cpu_backend.hpp"
#include "env/task_runtime.hpp"
#include "env/verifier.hpp"
#include "env/worker_pool.hpp"
#include "forked_rig.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using namespace leap;
using namespace leap::env;

TEST_SUITE_BEGIN("env");

namespace {

const std::string kStarter = std::string(LEAP_SOURCE_DIR) + "/tasks/starter";

/// What the forging worker does (shared between the parent and its forked workers).
struct Forgery {
  std::atomic<int> divide_by{1};       ///< every reported time is divided by this
  std::atomic<int> truncate_over{0};   ///< > 0: a job asked for more runs than this makes this many
  std::atomic<int> jobs{0};            ///< jobs run (candidate and no-op alike)
  std::atomic<int> largest_job{0};     ///< the most runs one job was asked for
  std::atomic<int> big_jobs{0};        ///< jobs of more than 23 runs (CPU-time check jobs) so far
  std::atomic<int> burn_big_job{0};    ///< > 0: that big job (1 = the first) also burns burn_ms of CPU
  std::atomic<int> burn_ms{0};
  std::atomic<int> big_in_flight{0};   ///< jobs of more than 23 runs running now
  std::atomic<int> most_big_in_flight{0};
};

/// The cpu backend, whose worker forges what it reports as code in the worker could.
class ForgingBackend : public CpuBackend {
 public:
  ForgingBackend(CpuBackendOptions o, Forgery* f) : CpuBackend(std::move(o)), f_(f) {}
  RunOutcome execute(const Artifact& a, const BoundPlan& p, const std::vector<void*>& t, const RunRequest& r,
                     std::atomic<int>* cur) override {
    f_->jobs.fetch_add(1);
    const int asked = std::max(0, r.warmup) + std::max(1, r.trials);
    if (asked > f_->largest_job.load()) f_->largest_job.store(asked);
    if (asked > 23 && f_->big_jobs.fetch_add(1) + 1 == f_->burn_big_job.load()) {  // machine noise, once
      const std::clock_t start = std::clock();
      while (std::clock() - start < f_->burn_ms.load() * (CLOCKS_PER_SEC / 1000)) asm volatile("");
    }
    RunRequest req = r;
    const int cut = f_->truncate_over.load();
    if (cut > 0 && asked > cut) req.trials = std::max(1, cut - std::max(0, r.warmup));  // the loop ends early
    if (asked > 23) {
      const int now = f_->big_in_flight.fetch_add(1) + 1;
      for (int most = f_->most_big_in_flight.load(); now > most && !f_->most_big_in_flight.compare_exchange_weak(most, now);) {
      }
    }
    RunOutcome out = CpuBackend::execute(a, p, t, req, cur);
    if (asked > 23) f_->big_in_flight.fetch_sub(1);
    // Forged from the fastest run, the closest to the code's own CPU a call: on a loaded machine
    // the median wall time of an honest job is inflated by preemption (48 us against a 16-us
    // fastest call with one core busy), and a third of that is no forgery of the code's CPU.
    if (const int by = f_->divide_by.load(); by > 1 && !out.times_ms.empty()) {
      const double fastest = *std::min_element(out.times_ms.begin(), out.times_ms.end());
      for (double& ms : out.times_ms) ms = fastest / by;
    }
    return out;
  }

 private:
  Forgery* f_;
};

VerifierOptions rig_options() {
  VerifierOptions vo;  // the defaults' schedule: 3 warm-up runs, 20 trials (no time box here)
  vo.seeds = 1;
  vo.warmup = 3;
  vo.trials = 20;
  vo.max_seconds = 0;
  vo.suspicious_speedup = 1e9;  // one measurement: this is about the CPU bound alone
  return vo;
}

struct Rig : leap::test::ForkedRig<Forgery, ForgingBackend> {
  Forgery* const forgery = shared;
  explicit Rig(int workers = 1) : ForkedRig({"-O2", "-fPIC", "-shared"}, rig_options(), workers) {}
};

}  // namespace

TEST_CASE("env cpu bound: a short kernel's forged times are seen by a CPU-time check job and timed by its CPU") {
  Rig rig;
  RuntimeTask task(tasks::load_task(kStarter + "/relu"), "cpu");  // 16 x 1024 floats: a few us a call
  const std::string answer = leap::test::read_file(kStarter + "/relu/solutions/cpu_loop.md");

  EvalResult honest = rig.verifier->evaluate(task, answer);
  CAPTURE(honest.feedback);
  REQUIRE(honest.verdict == Verdict::correct);
  CHECK_FALSE(honest.suspicious);
  CHECK(honest.details.count("cpu_bound") == 0);
  // 23 runs of tens of us are too few for the bound, so a CPU-time check job ran: enough runs that
  // their reported times sum to 8 ms (kResolveMs), so over a hundred here.
  REQUIRE(honest.details.count("cpu_check_runs") == 1);
  const int check_runs = std::stoi(honest.details.at("cpu_check_runs"));
  CHECK(check_runs * honest.candidate_ms >= 7.5);
  CHECK(check_runs > 23);
  CHECK(rig.forgery->largest_job.load() == check_runs);

  // The worker reports a fifth of its fastest call (as a patched timer, a moved start time or
  // work moved into the worker's own copies would): 5x the speedup, unless the bound sees it.
  // With 23 runs only, the bound's slack (2 ms a job, 87 us a run) hid it; the check job does
  // not. (A fifth, not a third: with a core busy the fastest wall time is up to 2x the code's CPU
  // a call, so a third of it is 1.5-1.7x below that CPU, at the bound's own factor, 1.5, plus its
  // slack of a quarter of the reported time: no forgery the bound can tell from noise.)
  // A fresh verifier (nothing known of this code yet) runs one.
  Rig fresh;
  fresh.forgery->divide_by = 5;
  EvalResult forged = fresh.verifier->evaluate(task, answer);
  CAPTURE(forged.feedback);
  REQUIRE(forged.verdict == Verdict::correct);
  CHECK(forged.suspicious);
  REQUIRE(forged.details.count("cpu_bound") == 1);
  CHECK(forged.details.count("cpu_check_s") == 1);  // measured now, by the check job
  CHECK(forged.details.count("cpu_check_cached") == 0);
  CHECK(forged.details.at("cpu_check_jobs") == "3");  // a bound that trips is measured again, twice
  CHECK(forged.feedback.find("timed by its CPU time") != std::string::npos);
  // Timed by its CPU: the candidate's time is its own CPU a run (measured by the parent from
  // outside, divided by the threads it may use), not the fifth the worker reported; and that is
  // of the honest code's CPU a call, not a multiple of it. (Compared across the two jobs the CPU a
  // run varies up to 2x with one core busy: 0.026 ms quiet, 0.057 and 0.033 loaded.)
  const double honest_cpu = std::stod(honest.details.at("cpu_ms_per_run"));
  const double forged_cpu = std::stod(forged.details.at("cpu_ms_per_run"));
  CAPTURE(honest_cpu);
  CAPTURE(forged_cpu);
  CHECK(forged.candidate_ms == doctest::Approx(forged_cpu / std::max(1, rig_options().threads)).epsilon(1e-4));
  CHECK(forged.candidate_ms > 0.3 * honest_cpu);
  CHECK(forged.candidate_ms < 3 * std::max(honest_cpu, honest.candidate_ms));

  // The first verifier knows this code's CPU a run from its honest grading: the same code graded
  // again is bounded by it without another check job (RL samples repeat)...
  const int jobs_before = rig.forgery->jobs.load();
  EvalResult repeat = rig.verifier->evaluate(task, answer);
  CAPTURE(repeat.feedback);
  REQUIRE(repeat.verdict == Verdict::correct);
  CHECK_FALSE(repeat.suspicious);
  CHECK(repeat.details.count("cpu_check_cached") == 1);
  CHECK(rig.forgery->jobs.load() - jobs_before == 3);  // its seed, the no-op, the timing job
  // ... and forged, it is flagged: the kept measurement has too few runs to resolve a fifth of
  // the time (its slack a run would be over half of it), so a check job sized for the forged
  // time runs (before, the kept one passed it now and then with a core busy).
  rig.forgery->divide_by = 5;
  EvalResult again = rig.verifier->evaluate(task, answer);
  CAPTURE(again.feedback);
  REQUIRE(again.verdict == Verdict::correct);
  CHECK(again.details.count("cpu_check_cached") == 0);
  CHECK(again.suspicious);
  CHECK(again.candidate_ms > 0.4 * honest_cpu);
}

namespace {

/// `answer` with an unused scratch buffer of `floats` float32 declared in its launch plan.
std::string with_scratch(std::string answer, int64_t floats) {
  const size_t at = answer.find("```yaml\nlaunches:");
  REQUIRE(at != std::string::npos);
  answer.insert(at + 8, "scratch:\n  pad: {dtype: float32, shape: [" + std::to_string(floats) + "]}\n");
  return answer;
}

}  // namespace

TEST_CASE("env cpu bound: a large unused scratch hides no forged time, since the parent zero-fills it") {
  // A red team (2026-12-07): matmul forged 10x (its timed calls' start moved forward) with an
  // unused 256-MiB scratch declared. The worker zero-filled the scratch before every run, in the
  // CPU the bound reads, for the job and its no-op alike: 8 ms a run with milliseconds of noise,
  // and 5% of it allowed, so the code's own CPU disappeared (-1 to -3 ms a run) and 4.4-9.4x was
  // paid unflagged against an honest 0.5x. The parent now zero-fills it between runs.
  Rig rig;
  RuntimeTask task(tasks::load_task(kStarter + "/matmul_square"), "cpu");
  const std::string answer =
      with_scratch(leap::test::read_file(kStarter + "/matmul_square/solutions/cpu_ikj.md"), int64_t(1) << 26);
  EvalResult honest = rig.verifier->evaluate(task, answer);
  CAPTURE(honest.feedback);
  REQUIRE(honest.verdict == Verdict::correct);
  CHECK_FALSE(honest.suspicious);
  // The no-op's CPU a run holds no zero-fill of 256 MiB (over 5 ms of memset here).
  REQUIRE(honest.details.count("cpu_noop_ms_per_run") == 1);
  CHECK(std::stod(honest.details.at("cpu_noop_ms_per_run")) < 1.0);
  const double honest_cpu = std::stod(honest.details.at("cpu_ms_per_run"));
  CHECK(honest_cpu > 0.5 * honest.candidate_ms);  // the code's own CPU, not lost in noise

  Rig fresh;
  fresh.forgery->divide_by = 10;
  EvalResult forged = fresh.verifier->evaluate(task, answer);
  CAPTURE(forged.feedback);
  REQUIRE(forged.verdict == Verdict::correct);
  CHECK(forged.suspicious);
  CHECK(forged.details.count("cpu_bound") == 1);
  CHECK(forged.candidate_ms > 0.4 * honest.candidate_ms);
}

TEST_CASE("env cpu bound: a scratch too large for enough check runs leaves a short kernel timed by its CPU") {
  // relu's few-us calls need about a thousand check runs to resolve a forged time; a 1-GiB
  // scratch, zero-filled after every run, allows 16 (kResolveScratchBytes): the candidate is then
  // charged at least its measured CPU a run, and a fifth of its time reported is not paid.
  Rig rig;
  RuntimeTask task(tasks::load_task(kStarter + "/relu"), "cpu");
  const std::string plain = leap::test::read_file(kStarter + "/relu/solutions/cpu_loop.md");
  EvalResult honest = rig.verifier->evaluate(task, plain);
  CAPTURE(honest.feedback);
  REQUIRE(honest.verdict == Verdict::correct);
  const double honest_cpu = std::stod(honest.details.at("cpu_ms_per_run"));

  Rig fresh;
  fresh.forgery->divide_by = 5;
  EvalResult forged = fresh.verifier->evaluate(task, with_scratch(plain, int64_t(1) << 28));
  CAPTURE(forged.feedback);
  CAPTURE(honest_cpu);
  REQUIRE(forged.verdict == Verdict::correct);
  CHECK(forged.details.count("cpu_check_capped") + forged.details.count("cpu_bound") >= 1);
  CHECK(forged.candidate_ms > 0.3 * honest_cpu);
  CHECK(std::stod(forged.details.at("cpu_noop_ms_per_run")) < 1.0);
}

TEST_CASE("env cpu bound: the same code graded side by side runs one CPU-time check at a time, the second reads its result") {
  // A group's repeated samples are graded at once by its grading threads: the same code's check
  // (three jobs of hundreds of runs) ran in each, side by side; now the second waits for the
  // first's and reads the kept result (or, if it cannot serve, runs its own after it).
  Rig rig(2);
  RuntimeTask task(tasks::load_task(kStarter + "/relu"), "cpu");
  const std::string answer = leap::test::read_file(kStarter + "/relu/solutions/cpu_loop.md");
  EvalResult results[2];
  {
    std::thread a([&] { results[0] = rig.verifier->evaluate(task, answer); });
    std::thread b([&] { results[1] = rig.verifier->evaluate(task, answer); });
    a.join();
    b.join();
  }
  int ran = 0, read = 0;
  for (const EvalResult& r : results) {
    CAPTURE(r.feedback);
    REQUIRE(r.verdict == Verdict::correct);
    CHECK_FALSE(r.suspicious);
    ran += r.details.count("cpu_check_jobs") && !r.details.count("cpu_check_cached");
    read += static_cast<int>(r.details.count("cpu_check_cached"));
  }
  CAPTURE(ran);
  CAPTURE(read);
  // A few-us kernel: its 23 timed runs are too few for the bound, so a check ran (on a loaded
  // machine a timing job can be long enough to bound itself: then that grading needs none).
  REQUIRE(ran + read >= 1);
  CHECK(rig.forgery->most_big_in_flight.load() == 1);  // never two check (or no-op) jobs of one code at once
  CHECK(ran + read <= 2);
}

TEST_CASE("env cpu bound: the parent copies the checked runs of a check job, none of its no-op jobs") {
  // A no-op's outputs are never checked: copying its runs' outputs too (as the check job's sample)
  // was a third of the parent's page faults. Its worker's side is unchanged: the same runs, counted.
  Rig rig;
  RuntimeTask task(tasks::load_task(kStarter + "/relu"), "cpu");  // one output; 23 timed runs fit the every-run check
  const std::string answer = leap::test::read_file(kStarter + "/relu/solutions/cpu_loop.md");
  const env::PoolStats before = rig.pool->stats();
  EvalResult r = rig.verifier->evaluate(task, answer);
  CAPTURE(r.feedback);
  REQUIRE(r.verdict == Verdict::correct);
  CHECK_FALSE(r.suspicious);
  const env::PoolStats after = rig.pool->stats();
  REQUIRE(r.details.count("cpu_check_jobs") == 1);
  const int checks = std::stoi(r.details.at("cpu_check_jobs"));
  const int runs = std::stoi(r.details.at("cpu_check_runs"));
  CAPTURE(checks);
  CAPTURE(runs);
  // Each check job copied its sample (check_job_sample, 128, or every run of a smaller job); with
  // the no-op jobs' copies it was three times that.
  CHECK(after.snapshot_copies - before.snapshot_copies == static_cast<int64_t>(checks) * std::min(runs, 128));
  CHECK(rig.forgery->big_jobs.load() == 3 * checks);  // each check job still between two no-op jobs
}

TEST_CASE("env cpu bound: a CPU-time check job that makes fewer runs than it was asked for fails") {
  Rig rig;
  RuntimeTask task(tasks::load_task(kStarter + "/relu"), "cpu");
  const std::string answer = leap::test::read_file(kStarter + "/relu/solutions/cpu_loop.md");
  // Code that ends the worker's run loop early where it is long (and reports the runs it made):
  // the runs it skipped would never be checked, nor their CPU counted.
  rig.forgery->truncate_over = 30;  // the timing job has 23 runs, a CPU-time check job more
  EvalResult r = rig.verifier->evaluate(task, answer);
  CAPTURE(r.feedback);
  CHECK(r.verdict == Verdict::runtime_error);
  // Refused by the pool (a reply's run list must hold every run the job asks for), or by the
  // verifier's own count of a CPU-time check job.
  CHECK((r.feedback.find("runs it was asked for") != std::string::npos ||
         r.feedback.find("the job asks for at least") != std::string::npos));
}

TEST_CASE("env cpu bound: a kernel long enough for the bound gets no check job") {
  Rig rig;
  RuntimeTask task(tasks::load_task(kStarter + "/matmul_square"), "cpu");
  const std::string answer = leap::test::read_file(kStarter + "/matmul_square/solutions/cpu_ikj.md");
  EvalResult r = rig.verifier->evaluate(task, answer);
  CAPTURE(r.feedback);
  REQUIRE(r.verdict == Verdict::correct);
  CHECK_FALSE(r.suspicious);
  REQUIRE(r.candidate_ms * 23 >= 8.0);  // (the premise: 23 runs of it sum past kResolveMs)
  // No job of more runs than the timing job's (a check job of the same 23 runs only where machine
  // noise tripped the bound once: it is measured again before it flags)
  CHECK(rig.forgery->largest_job.load() == 23);
  if (r.details.count("cpu_check_runs")) CHECK(r.details.at("cpu_check_runs") == "23");
}


TEST_CASE("env cpu bound: one check job slowed by machine noise is measured again, and honest code passes") {
  Rig rig;
  RuntimeTask task(tasks::load_task(kStarter + "/relu"), "cpu");
  const std::string answer = leap::test::read_file(kStarter + "/relu/solutions/cpu_loop.md");
  // The first check job of the code (big job 2: its no-op runs first) takes 40 ms of CPU more, as
  // a burst of page faults or another process's memory traffic would cost it: over its ~110
  // runs, 0.36 ms a run against ~0.07 ms reported, far past the bound.
  rig.forgery->burn_big_job = 2;
  rig.forgery->burn_ms = 40;
  EvalResult r = rig.verifier->evaluate(task, answer);
  CAPTURE(r.feedback);
  REQUIRE(r.verdict == Verdict::correct);
  const int checks = std::stoi(r.details.at("cpu_check_jobs"));
  CHECK(checks >= 2);  // measured again (a third time only if the machine's own noise tripped it again)
  CHECK(rig.forgery->big_jobs.load() == 3 * checks);  // each check job between two no-op jobs
  CHECK_FALSE(r.suspicious);
  CHECK(r.details.count("cpu_bound") == 0);
  CHECK(std::stod(r.details.at("cpu_ms_per_run")) < 0.2);  // the second (lower) measurement is kept
}

namespace {

/// What the predicting worker does (shared between the parent and its forked workers).
struct Prediction {
  std::atomic<int> sample{128};     ///< how many runs of a check job the parent checks (check_job_sample)
  std::atomic<int> predicted{0};    ///< check jobs whose checked runs the worker predicted
};

/// The cpu backend whose worker rebuilds, from what the job tells the worker, the list of a
/// CPU-time check job's checked runs the way the parent drew it before 62f8691 (a shuffle of the
/// runs seeded by the input-rewrite secret, its first `sample` runs), and hands it to the answer
/// (LEAP_TEST_CHECKED), with the last runs (each input set's last is always checked): what a red
/// team did by reading the secret from its worker's stack.
class PredictingBackend : public CpuBackend {
 public:
  PredictingBackend(CpuBackendOptions o, Prediction* p) : CpuBackend(std::move(o)), p_(p) {}
  RunOutcome execute(const Artifact& a, const BoundPlan& p, const std::vector<void*>& t, const RunRequest& r,
                     std::atomic<int>* cur) override {
    const int n = std::max(0, r.warmup) + std::max(1, r.trials);
    unsetenv("LEAP_TEST_CHECKED");
    if (n > 23 && r.rewrite_seed != 0) {  // a CPU-time check job
      std::vector<int> runs(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) runs[static_cast<size_t>(i)] = i;
      std::mt19937_64 pick(r.rewrite_seed);
      std::shuffle(runs.begin(), runs.end(), pick);
      std::string list = ",";
      for (int i = 0; i < std::min(n, p_->sample.load()); ++i) list += std::to_string(runs[static_cast<size_t>(i)]) + ",";
      for (int t = std::max(0, n - 8); t < n; ++t) list += std::to_string(t) + ",";  // each input set's last run
      setenv("LEAP_TEST_CHECKED", list.c_str(), 1);
      p_->predicted.fetch_add(1);
    }
    return CpuBackend::execute(a, p, t, r, cur);
  }

 private:
  Prediction* p_;
};

}  // namespace

TEST_CASE("env cpu bound: the runs a check job checks cannot be predicted from what its worker is told") {
  // An answer that computes only the runs it is told are checked and skips the others. Before
  // 62f8691 the list came from the input-rewrite secret, which is in the worker: a red team
  // rebuilt it there (6.4-9.8x on silu against an honest 0.36x). 16 runs of the check job's
  // 100-300 are checked here (the default's 128 would leave the answer few runs to skip): drawn
  // from a secret the worker never sees, the chance that none of them is a skipped run is below
  // 1e-18.
  VerifierOptions vo = rig_options();
  vo.check_job_sample = 16;
  leap::test::ForkedRig<Prediction, PredictingBackend> rig({"-O2", "-fPIC", "-shared"}, vo);
  rig.shared->sample = 16;
  RuntimeTask task(tasks::load_task(kStarter + "/relu"), "cpu");
  const std::string answer =
      "```cpp\n#include <cstdint>\n#include <cstdlib>\n#include <cstring>\n#include <string>\n"
      "static long calls_ = 0;\n"
      "extern \"C\" void relu(const float* x, float* y, int64_t n) {\n"
      "  const long call = calls_++;\n"
      "  const char* checked = std::getenv(\"LEAP_TEST_CHECKED\");\n"
      "  if (checked && !std::strstr(checked, (\",\" + std::to_string(call) + \",\").c_str())) return;  // not checked: skipped\n"
      "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;\n"
      "}\n```\n```yaml\nlaunches:\n  - kernel: relu\n    args: [x, y, numel(x)]\n```\n";
  EvalResult r = rig.verifier->evaluate(task, answer);
  CAPTURE(r.feedback);
  REQUIRE(rig.shared->predicted.load() >= 1);  // a check job ran, and the worker "predicted" its checks
  CHECK(r.verdict == Verdict::wrong_output);
  CHECK(r.feedback.find("on timed call") != std::string::npos);
}
