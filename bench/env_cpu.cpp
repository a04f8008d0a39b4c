// Benchmark (not a test): evaluations per second of the cpu environment on the starter set's cpu
// solutions, with 1 and 2 workers, with and without the compile cache.
//   ninja -C build bench_env_cpu && ./build/bench_env_cpu [tasks/starter] [passes]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "cli/environment.hpp"
#include "env/task_runtime.hpp"
#include "tasks/task_spec.hpp"

namespace fs = std::filesystem;
using namespace leap;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Figure {
  double evals_per_s = 0;
  int correct = 0, total = 0;
};

Figure measure(const std::vector<cli::GradeJob>& jobs, int workers, bool cache, const std::string& cache_dir, int passes) {
  config::EnvConfig e;
  e.workers = workers;
  e.compile_cache = cache;
  e.cache_dir = cache_dir;
  e.timing.warmup = 1;
  e.timing.trials = 5;
  e.timing.max_seconds = 0.1;
  Figure f;
  double seconds = 0;
  for (int p = 0; p < passes; ++p) {
    // Without the cache every pass gets a fresh (temporary) cache folder, so every answer compiles.
    auto env = cli::make_environment(e, "cpu");
    auto t0 = std::chrono::steady_clock::now();
    auto results = cli::grade_all(*env->verifier, jobs, workers);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& r : results) f.correct += r.is_correct();
    f.total += static_cast<int>(results.size());
  }
  f.evals_per_s = f.total / seconds;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::string(LEAP_SOURCE_DIR) + "/tasks/starter";
  const int passes = argc > 2 ? std::atoi(argv[2]) : 1;
  auto set = tasks::load_task_set(dir);
  std::vector<std::unique_ptr<env::RuntimeTask>> rts;
  std::vector<cli::GradeJob> jobs;
  for (const auto& spec : set.tasks) {
    rts.push_back(std::make_unique<env::RuntimeTask>(spec, "cpu"));
    for (const auto& e : fs::directory_iterator(fs::path(spec.dir) / "solutions"))
      if (e.path().filename().string().rfind("cpu_", 0) == 0) jobs.push_back({rts.back().get(), e.path().string(), slurp(e.path())});
  }
  std::string cache_dir = (fs::temp_directory_path() / ("leap-bench-cache-" + std::to_string(getpid()))).string();
  std::printf("bench_env_cpu: %zu cpu answers of %s, %d pass(es); seeds 5, timing warmup 1, trials 5, max 0.1 s\n",
              jobs.size(), set.name.c_str(), passes);
  // Warm the shared cache once (not measured).
  measure(jobs, 2, true, cache_dir, 1);
  Figure r[2][2];  // [workers-1][cache]
  for (int w = 1; w <= 2; ++w)
    for (int c = 0; c <= 1; ++c) {
      r[w - 1][c] = measure(jobs, w, c == 1, cache_dir, passes);
      std::printf("workers %d, compile cache %-3s: %7.2f evaluations/s (%d/%d correct)\n", w, c ? "on" : "off",
                  r[w - 1][c].evals_per_s, r[w - 1][c].correct, r[w - 1][c].total);
    }
  std::printf("ratio 2 workers / 1 worker: cache off %.2fx, cache on %.2fx\n", r[1][0].evals_per_s / r[0][0].evals_per_s,
              r[1][1].evals_per_s / r[0][1].evals_per_s);
  std::printf("ratio cache on / off:       1 worker %.2fx, 2 workers %.2fx\n", r[0][1].evals_per_s / r[0][0].evals_per_s,
              r[1][1].evals_per_s / r[1][0].evals_per_s);
  std::string cmd = "rm -rf '" + cache_dir + "'";
  return std::system(cmd.c_str()) == 0 ? 0 : 1;
}
