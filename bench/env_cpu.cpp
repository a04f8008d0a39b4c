// Benchmark (not a test): cached evaluations per second of the cpu environment on the starter
// set's cpu solutions, with 1 and 2 workers, alternating two sides (A, B, A, B, ...) and printing
// the median of the per-pair ratios B/A with its range; then the cost of one cached evaluation
// split into process start, candidate run (the worker job, IPC included) and the parent's share
// (reference, input generation, checks). The two sides (COMPARE):
//   parent (default): the parent's share before issue "Environment V" item 8 (every evaluation
//     generates its inputs and runs the reference on them, VerifierOptions::reference_cache_mb 0;
//     every run of a CPU-time check job checked, check_job_sample 0) against the defaults (the
//     reference cache of env/reference_cache.hpp; a sample of a check job's runs checked), both
//     with sandboxed exec-started workers and the one-pass output check; each pass grades every
//     answer twice in a row, as a group's answers share a task;
//   spawn: the older path that forks the parent per worker (PoolOptions::Spawn::fork) against
//     sandboxed exec-started workers (the default);
//   seedjob: a fresh worker per correctness seed (VerifierOptions::correctness_seeds_per_job 1)
//     against the default (the seeds in one job where they fit), each answer graded twice.
// Each pass lists every answer twice in a row and grades the list as the trainer does
// (rl::VerifierGrader, one grading thread per worker), which takes a copy of an answer in
// flight only when nothing else is waiting (rl/grade_queue.hpp).
// The parent holds PARENT_MB of touched memory (default 2048), as a trainer holds its policy's
// weights and optimizer state: that is what a fork of the parent copies page tables for.
//   ninja -C build bench_env_cpu && ./build/bench_env_cpu [tasks/starter] [pairs=5] [parent_mb=2048] [COMPARE]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/environment.hpp"
#include "env/cpu_backend.hpp"
#include "env/task_runtime.hpp"
#include "env/verifier.hpp"
#include "env/worker_pool.hpp"
#include "tasks/task_spec.hpp"
#include "util/fs.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR
#include "pairs.hpp"

namespace fs = std::filesystem;
using namespace leap;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Pass {
  double evals_per_s = 0;
  // Per evaluation: waiting for a ready worker (process start on the critical path), starting
  // workers (mostly on the pool's background thread), the worker jobs, and the rest of the
  // grading threads' time (the parent: reference, inputs, checks).
  double wait_ms = 0, spawn_ms = 0, job_ms = 0, parent_ms = 0, wall_ms = 0;
  double jobs = 0, spawns = 0;  // worker jobs and worker processes started, per evaluation
  double check_jobs = 0;        // CPU-time check jobs (each between two no-op jobs), per evaluation
  int correct = 0, total = 0;
};

/// One side of the comparison.
struct Side {
  const char* name;
  env::PoolOptions::Spawn spawn;
  size_t reference_cache_mb;
  int check_job_sample;
  int seeds_per_job = env::VerifierOptions{}.correctness_seeds_per_job;
};

Pass run_pass(const std::vector<cli::GradeJob>& jobs, int workers, const Side& side, const std::string& cache_dir) {
  config::EnvConfig e;
  e.workers = workers;
  e.timing.warmup = 1;
  e.timing.trials = 5;
  e.timing.max_seconds = 0.1;
  env::CpuBackendOptions co;
  co.cache_dir = cache_dir;
  auto backend = std::make_shared<env::CpuBackend>(co);
  env::PoolOptions po;
  po.workers = workers;
  po.run_timeout_s = e.run_timeout_s;
  po.cpu_time_limit = true;
  po.spawn = side.spawn;
  auto pool = std::make_shared<env::WorkerPool>(backend, po);
  env::VerifierOptions vo = cli::verifier_options(e);
  vo.reference_cache_mb = side.reference_cache_mb;
  vo.check_job_sample = side.check_job_sample;
  vo.correctness_seeds_per_job = side.seeds_per_job;
  env::Verifier verifier(backend, pool, vo);
  const env::PoolStats before = pool->stats();
  auto t0 = std::chrono::steady_clock::now();
  auto results = cli::grade_all(verifier, jobs, workers);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const env::PoolStats after = pool->stats();
  Pass p;
  for (const auto& r : results) {
    p.correct += r.is_correct();
    if (auto it = r.details.find("cpu_check_jobs"); it != r.details.end()) p.check_jobs += std::stod(it->second);
  }
  p.total = static_cast<int>(results.size());
  p.evals_per_s = p.total / wall;
  const double n = p.total;
  p.wall_ms = 1000 * wall / n;
  p.wait_ms = 1000 * (after.wait_s - before.wait_s) / n;
  p.spawn_ms = 1000 * (after.spawn_s - before.spawn_s) / n;
  p.job_ms = 1000 * (after.job_s - before.job_s) / n;
  p.jobs = static_cast<double>(after.jobs - before.jobs) / n;
  p.spawns = static_cast<double>(after.spawns - before.spawns) / n;
  p.check_jobs /= n;
  p.parent_ms = std::max(0.0, 1000 * wall * workers / n - p.wait_ms - p.job_ms);
  return p;
}

using leap::bench::median;

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::string(LEAP_SOURCE_DIR) + "/tasks/starter";
  const int pairs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  const size_t parent_mb = argc > 3 ? static_cast<size_t>(std::atol(argv[3])) : 2048;
  const std::string compare = argc > 4 ? argv[4] : "parent";
  using S = env::PoolOptions::Spawn;
  const env::VerifierOptions defaults;
  Side sides[2] = {{"before", S::exec, 0, 0}, {"after", S::exec, defaults.reference_cache_mb, defaults.check_job_sample}};
  if (compare == "spawn") {
    sides[0] = {"fork", S::fork, defaults.reference_cache_mb, defaults.check_job_sample};
    sides[1] = {"exec", S::exec, defaults.reference_cache_mb, defaults.check_job_sample};
  } else if (compare == "seedjob") {
    sides[0] = {"per-seed", S::exec, defaults.reference_cache_mb, defaults.check_job_sample, 1};
    sides[1] = {"seeds-in-one", S::exec, defaults.reference_cache_mb, defaults.check_job_sample};
  } else if (compare != "parent") {
    std::fprintf(stderr, "bench_env_cpu: COMPARE is parent, spawn or seedjob, not '%s'\n", compare.c_str());
    return 2;
  }
  auto set = tasks::load_task_set(dir);
  std::vector<std::unique_ptr<env::RuntimeTask>> rts;
  std::vector<cli::GradeJob> jobs;
  for (const auto& spec : set.tasks) {
    rts.push_back(std::make_unique<env::RuntimeTask>(spec, "cpu"));
    for (const auto& e : fs::directory_iterator(fs::path(spec.dir) / "solutions"))
      if (e.path().filename().string().rfind("cpu_", 0) == 0) jobs.push_back({rts.back().get(), e.path().string(), slurp(e.path())});
  }
  if (compare != "spawn") {  // two answers per task in a row, as in a group
    std::vector<cli::GradeJob> twice;
    for (const auto& j : jobs) {
      twice.push_back(j);
      twice.push_back(j);
    }
    jobs = std::move(twice);
  }
  // The trainer-like parent: touched memory that a fork must map into every child.
  std::vector<char> ballast(parent_mb << 20);
  std::memset(ballast.data(), 1, ballast.size());
  std::string cache_dir = (fs::temp_directory_path() / ("leap-bench-cache-" + std::to_string(getpid()))).string();
  std::printf("bench_env_cpu: %s against %s, %zu cpu answers of %s, compile cache on (warmed), %d pairs per worker "
              "count; seeds 5, timing warmup 1, trials 5, max 0.1 s; parent holds %zu MB\n",
              sides[1].name, sides[0].name, jobs.size(), set.name.c_str(), pairs, parent_mb);
  run_pass(jobs, 2, sides[1], cache_dir);  // warms the compile cache (not measured)
  for (int w = 1; w <= 2; ++w) {
    std::vector<double> ratios, rate_a, rate_b;
    std::vector<Pass> passes_b, passes_a;
    for (int i = 0; i < pairs; ++i) {
      Pass a = run_pass(jobs, w, sides[0], cache_dir);
      Pass b = run_pass(jobs, w, sides[1], cache_dir);
      ratios.push_back(b.evals_per_s / a.evals_per_s);
      rate_a.push_back(a.evals_per_s);
      rate_b.push_back(b.evals_per_s);
      passes_a.push_back(a);
      passes_b.push_back(b);
      if (a.correct != a.total || b.correct != b.total)
        std::printf("  warning: pair %d: %s %d/%d correct, %s %d/%d correct\n", i, sides[0].name, a.correct, a.total,
                    sides[1].name, b.correct, b.total);
    }
    std::printf("workers %d: %s %.2f eval/s, %s %.2f eval/s (medians); %s/%s median %.2fx "
                "[min %.2fx, max %.2fx] over %d pairs\n",
                w, sides[0].name, median(rate_a), sides[1].name, median(rate_b), sides[1].name, sides[0].name,
                median(ratios), *std::min_element(ratios.begin(), ratios.end()),
                *std::max_element(ratios.begin(), ratios.end()), pairs);
    for (auto* side : {&passes_a, &passes_b}) {
      std::vector<double> wt, sp, jb, pa, nj, ns, nc;
      for (const auto& p : *side) {
        nc.push_back(p.check_jobs);
        nj.push_back(p.jobs);
        ns.push_back(p.spawns);
        wt.push_back(p.wait_ms);
        sp.push_back(p.spawn_ms);
        jb.push_back(p.job_ms);
        pa.push_back(p.parent_ms);
      }
      // Shares of the grading threads' time (workers x wall) per evaluation.
      const double total = median(wt) + median(jb) + median(pa);
      std::printf("  %-9s one cached evaluation, per grading thread (medians): process start %.1f ms (%.0f%%; "
                  "waiting for a ready worker), candidate run %.1f ms (%.0f%%), parent: reference and checks %.1f ms "
                  "(%.0f%%); starting its workers took %.1f ms, mostly in the background; %.2f worker jobs and %.2f "
                  "workers started an evaluation, %.2f of the jobs CPU-time checks (each with two no-op jobs)\n",
                  (std::string(side == &passes_a ? sides[0].name : sides[1].name) + ":").c_str(), median(wt), 100 * median(wt) / total, median(jb),
                  100 * median(jb) / total, median(pa), 100 * median(pa) / total, median(sp), median(nj), median(ns), median(nc));
    }
  }
  return util::remove_tree(cache_dir) ? 0 : 1;
}
