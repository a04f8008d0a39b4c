// Benchmark (not a test): cached evaluations per second of the cpu environment on the starter
// set's cpu solutions, sandboxed exec-started workers (the default) against the older path that
// forks the parent per worker (PoolOptions::Spawn::fork), with 1 and 2 workers, alternating the
// two sides (fork, exec, fork, exec, ...) and printing the median of the per-pair ratios with its
// range; then the cost of one cached evaluation split into process start, candidate run (the
// worker job, IPC included) and the parent's share (reference, input generation, checks).
//
// The parent holds PARENT_MB of touched memory (default 2048), as a trainer holds its policy's
// weights and optimizer state: that is what a fork of the parent copies page tables for.
//   ninja -C build bench_env_cpu && ./build/bench_env_cpu [tasks/starter] [pairs=5] [parent_mb=2048]
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
  int correct = 0, total = 0;
};

Pass run_pass(const std::vector<cli::GradeJob>& jobs, int workers, env::PoolOptions::Spawn spawn,
              const std::string& cache_dir) {
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
  po.spawn = spawn;
  auto pool = std::make_shared<env::WorkerPool>(backend, po);
  env::Verifier verifier(backend, pool, cli::verifier_options(e));
  const env::PoolStats before = pool->stats();
  auto t0 = std::chrono::steady_clock::now();
  auto results = cli::grade_all(verifier, jobs, workers);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const env::PoolStats after = pool->stats();
  Pass p;
  for (const auto& r : results) p.correct += r.is_correct();
  p.total = static_cast<int>(results.size());
  p.evals_per_s = p.total / wall;
  const double n = p.total;
  p.wall_ms = 1000 * wall / n;
  p.wait_ms = 1000 * (after.wait_s - before.wait_s) / n;
  p.spawn_ms = 1000 * (after.spawn_s - before.spawn_s) / n;
  p.job_ms = 1000 * (after.job_s - before.job_s) / n;
  p.parent_ms = std::max(0.0, 1000 * wall * workers / n - p.wait_ms - p.job_ms);
  return p;
}

using leap::bench::median;

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::string(LEAP_SOURCE_DIR) + "/tasks/starter";
  const int pairs = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  const size_t parent_mb = argc > 3 ? static_cast<size_t>(std::atol(argv[3])) : 2048;
  auto set = tasks::load_task_set(dir);
  std::vector<std::unique_ptr<env::RuntimeTask>> rts;
  std::vector<cli::GradeJob> jobs;
  for (const auto& spec : set.tasks) {
    rts.push_back(std::make_unique<env::RuntimeTask>(spec, "cpu"));
    for (const auto& e : fs::directory_iterator(fs::path(spec.dir) / "solutions"))
      if (e.path().filename().string().rfind("cpu_", 0) == 0) jobs.push_back({rts.back().get(), e.path().string(), slurp(e.path())});
  }
  // The trainer-like parent: touched memory that a fork must map into every child.
  std::vector<char> ballast(parent_mb << 20);
  std::memset(ballast.data(), 1, ballast.size());
  std::string cache_dir = (fs::temp_directory_path() / ("leap-bench-cache-" + std::to_string(getpid()))).string();
  std::printf("bench_env_cpu: %zu cpu answers of %s, compile cache on (warmed), %d pairs per worker count; "
              "seeds 5, timing warmup 1, trials 5, max 0.1 s; parent holds %zu MB\n",
              jobs.size(), set.name.c_str(), pairs, parent_mb);
  run_pass(jobs, 2, env::PoolOptions::Spawn::exec, cache_dir);  // warms the compile cache (not measured)
  using S = env::PoolOptions::Spawn;
  for (int w = 1; w <= 2; ++w) {
    std::vector<double> ratios, fork_rate, exec_rate;
    Pass last_fork, last_exec;
    std::vector<Pass> exec_passes, fork_passes;
    for (int i = 0; i < pairs; ++i) {
      Pass a = run_pass(jobs, w, S::fork, cache_dir);
      Pass b = run_pass(jobs, w, S::exec, cache_dir);
      ratios.push_back(b.evals_per_s / a.evals_per_s);
      fork_rate.push_back(a.evals_per_s);
      exec_rate.push_back(b.evals_per_s);
      fork_passes.push_back(a);
      exec_passes.push_back(b);
      if (a.correct != a.total || b.correct != b.total)
        std::printf("  warning: pair %d: fork %d/%d correct, exec %d/%d correct\n", i, a.correct, a.total, b.correct, b.total);
    }
    std::printf("workers %d: fork %.2f eval/s, exec (sandboxed) %.2f eval/s (medians); exec/fork median %.2fx "
                "[min %.2fx, max %.2fx] over %d pairs\n",
                w, median(fork_rate), median(exec_rate), median(ratios), *std::min_element(ratios.begin(), ratios.end()),
                *std::max_element(ratios.begin(), ratios.end()), pairs);
    for (auto* side : {&fork_passes, &exec_passes}) {
      std::vector<double> wt, sp, jb, pa;
      for (const auto& p : *side) {
        wt.push_back(p.wait_ms);
        sp.push_back(p.spawn_ms);
        jb.push_back(p.job_ms);
        pa.push_back(p.parent_ms);
      }
      // Shares of the grading threads' time (workers x wall) per evaluation.
      const double total = median(wt) + median(jb) + median(pa);
      std::printf("  %-5s one cached evaluation, per grading thread (medians): process start %.1f ms (%.0f%%; "
                  "waiting for a ready worker), candidate run %.1f ms (%.0f%%), parent: reference and checks %.1f ms "
                  "(%.0f%%); starting its workers took %.1f ms, mostly in the background\n",
                  side == &fork_passes ? "fork:" : "exec:", median(wt), 100 * median(wt) / total, median(jb),
                  100 * median(jb) / total, median(pa), 100 * median(pa) / total, median(sp));
    }
  }
  return util::remove_tree(cache_dir) ? 0 : 1;
}
