// The full verifier on the cpu backend: real compiler, real workers, TorchScript references.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/environment.hpp"
#include "config/experiment.hpp"
#include "env/reference.hpp"
#include "env/validate.hpp"
#include "env/verifier.hpp"
#include "store/statement.hpp"
#include "store/store.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using namespace leap::env;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("env");

namespace {

const std::string kStarter = std::string(LEAP_SOURCE_DIR) + "/tasks/starter";
const char* kFastFlags = "-O1 -fPIC -shared";  // the 2-core test machine

leap::config::EnvConfig test_env(const std::string& cache_dir) {
  leap::config::EnvConfig e;
  e.workers = 2;
  e.seeds = 3;
  e.run_timeout_s = 2.0;
  e.cache_dir = cache_dir;
  e.cpu.flags = kFastFlags;
  e.timing.warmup = 1;
  e.timing.trials = 3;
  e.timing.max_seconds = 0.2;
  return e;
}

// One environment shared by the tests of this file (workers and the compile cache).
struct Shared {
  leap::test::TempDir cache;
  std::unique_ptr<leap::cli::Environment> env;
  Shared() { env = leap::cli::make_environment(test_env(cache.path.string()), "cpu"); }
};
Shared& shared() {
  static Shared s;
  return s;
}

std::unique_ptr<RuntimeTask> starter_task(const std::string& name) {
  return std::make_unique<RuntimeTask>(leap::tasks::load_task(kStarter + "/" + name), "cpu");
}

std::string answer(const std::string& code, const std::string& plan) {
  return "Here is my kernel.\n\n```cpp\n" + code + "```\n\n```yaml\n" + plan + "```\n";
}

const char* kSoftmaxPlan = "launches:\n  - kernel: softmax_rows\n    args: [x, y, B, N]\n";

// Softmax rows with a body fragment replaced, for the failure kinds.
std::string softmax_code(const std::string& extra_before, const std::string& rows_expr = "rows",
                         const std::string& extra_after = "") {
  return "#include <cmath>\n#include <cstdint>\n#include <unistd.h>\n"
         "extern \"C\" void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {\n" +
         extra_before +
         "  for (int64_t r = 0; r < " + rows_expr + "; ++r) {\n"
         "    const float* xr = x + r * cols; float* yr = y + r * cols;\n"
         "    float m = xr[0]; for (int64_t c = 1; c < cols; ++c) m = xr[c] > m ? xr[c] : m;\n"
         "    float s = 0; for (int64_t c = 0; c < cols; ++c) { yr[c] = std::exp(xr[c] - m); s += yr[c]; }\n"
         "    for (int64_t c = 0; c < cols; ++c) yr[c] /= s;\n"
         "  }\n" + extra_after + "}\n";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// The project's python ($LEAP_PYTHON, else the checkout's .venv), for traced fixtures.
std::string leap_test_python() {
  if (const char* p = std::getenv("LEAP_PYTHON"); p != nullptr && *p != '\0') return p;
  return std::string(LEAP_SOURCE_DIR) + "/.venv/bin/python";
}

EvalResult eval(const RuntimeTask& t, const std::string& text) {
  return shared().env->verifier->evaluate(t, text);
}

}  // namespace

TEST_CASE("env: verifier verdicts on the cpu backend (softmax_rows)") {
  auto task = starter_task("softmax_rows");
  const std::string good = leap::test::read_file(kStarter + "/softmax_rows/solutions/cpu_rows.md");

  SUBCASE("a correct kernel is correct, with timings") {
    auto r = eval(*task, good);
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::correct);
    CHECK(r.candidate_ms > 0);
    CHECK(r.reference_ms > 0);
    CHECK(r.speedup > 0);
    CHECK(contains(r.feedback, "speedup"));
    CHECK(r.details.at("reference_device") == "cpu");  // the cpu backend times the reference here
  }
  SUBCASE("a kernel that writes nothing: NaN pre-fill -> wrong_output") {
    auto r = eval(*task, answer("#include <cstdint>\nextern \"C\" void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {}\n",
                                kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::wrong_output);
    CHECK(contains(r.feedback, "max abs error"));
    CHECK(contains(r.feedback, "first bad index: [0, 0]"));
    CHECK(contains(r.feedback, "never written"));
    CHECK(contains(r.feedback, "beyond tolerance (|out - ref| <= "));
    CHECK(r.details.at("mismatches") == "8192");
  }
  SUBCASE("an integer output one off is named as compared exactly, not by a float tolerance") {
    // A tester (2026-12-07): "(|out - ref| <= 0 + 0.0001 * |ref|)" then "expected 31717, got 31718".
    auto argmax = starter_task("argmax_rows");
    std::string off = leap::test::read_file(kStarter + "/argmax_rows/solutions/cpu_rows.md");
    const size_t at = off.find("idx[r] = bi;");
    REQUIRE(at != std::string::npos);
    off.replace(at, 12, "idx[r] = bi + (r == 3);");
    auto r = eval(*argmax, off);
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::wrong_output);
    CHECK(contains(r.feedback, "1 of "));
    CHECK(contains(r.feedback, "(Long outputs must equal the reference exactly)"));
    CHECK_FALSE(contains(r.feedback, "|out - ref|"));
    CHECK(contains(r.feedback, "first bad index: [3]"));
  }
  SUBCASE("a kernel that writes half the output -> wrong_output naming the first bad index") {
    auto r = eval(*task, answer(softmax_code("", "rows / 2"), kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::wrong_output);
    CHECK(r.details.at("mismatches") == "4096");
    CHECK(r.details.at("first_bad_index") == "[8, 0]");
  }
  SUBCASE("a segfault is a runtime_error and the next correct kernel still passes") {
    auto r = eval(*task, answer(softmax_code("  *(volatile int*)nullptr = 1;\n"), kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::runtime_error);
    CHECK(contains(r.feedback, "SIGSEGV"));
    auto ok = eval(*task, good);
    CHECK(ok.verdict == Verdict::correct);
  }
  SUBCASE("an infinite loop is a timeout and the pool works again") {
    auto r = eval(*task, answer(softmax_code("  for (volatile int i = 0;; ) { (void)i; }\n"), kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::timeout);
    // One seed's limit (env.run_timeout_s 2), not the 3 seeds' job's pooled.
    CHECK(contains(r.feedback, "within 2 s"));
    CHECK(contains(r.feedback, "on seed 1 of 3"));
    auto ok = eval(*task, good);
    CHECK(ok.verdict == Verdict::correct);
  }
  SUBCASE("a kernel that writes its input -> inputs_modified") {
    auto r = eval(*task, answer(softmax_code("", "rows", "  const_cast<float*>(x)[5] += 1.0f;\n"), kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::inputs_modified);
    CHECK(contains(r.feedback, "input 'x'"));
  }
  SUBCASE("a compile error carries the compiler's line number") {
    auto r = eval(*task, answer("#include <cstdint>\nextern \"C\" void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {\n"
                                "  y[0] = undefined_thing;\n}\n",
                                kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::compile_error);
    CHECK(contains(r.feedback, ":3:"));
    CHECK(contains(r.feedback, "undefined_thing"));
  }
  SUBCASE("format errors of several kinds") {
    auto no_yaml = eval(*task, "```cpp\nextern \"C\" void f() {}\n```\n");
    CHECK(no_yaml.verdict == Verdict::format_error);
    auto no_code = eval(*task, std::string("```yaml\n") + kSoftmaxPlan + "```\n");
    CHECK(no_code.verdict == Verdict::format_error);
    auto cuda_block = eval(*task, std::string("```cuda\n__global__ void f() {}\n```\n```yaml\n") + kSoftmaxPlan + "```\n");
    CHECK(cuda_block.verdict == Verdict::format_error);
    auto bad_name = eval(*task, answer(softmax_code(""), "launches:\n  - kernel: softmax_rows\n    args: [x, z, B, N]\n"));
    CHECK(bad_name.verdict == Verdict::format_error);
    CHECK(contains(bad_name.feedback, "z"));
    auto bad_expr = eval(*task, answer(softmax_code(""), "launches:\n  - kernel: softmax_rows\n    args: [x, y, B **, N]\n"));
    CHECK(bad_expr.verdict == Verdict::format_error);
    auto unclosed = eval(*task, "<think>I will write a kernel");
    CHECK(unclosed.verdict == Verdict::format_error);
  }
  SUBCASE("a launch naming an unknown kernel -> launch_error") {
    auto r = eval(*task, answer(softmax_code(""), "launches:\n  - kernel: softmax_fast\n    args: [x, y, B, N]\n"));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::launch_error);
    CHECK(contains(r.feedback, "softmax_fast"));
  }
}

TEST_CASE("env: a kernel that caches its first result fails after the timing loop (rotated inputs)") {
  auto task = starter_task("softmax_rows");
  // Computes once per process, then returns. With a fresh worker per correctness seed it passes
  // every seed but leaves the other rotated timing sets unwritten; with the seeds in one job
  // (the default) it fails on seed 2 already.
  const std::string once = answer(softmax_code("  static bool done = false;\n  if (done) return;\n  done = true;\n"), kSoftmaxPlan);
  auto opts = shared().env->verifier->options();
  opts.correctness_seeds_per_job = 1;
  Verifier per_seed(shared().env->backend, shared().env->pool, opts);
  auto r = per_seed.evaluate(*task, once);
  CAPTURE(r.feedback);
  CHECK(r.verdict == Verdict::wrong_output);
  CHECK(contains(r.feedback, "after the timing loop"));
  auto d = eval(*task, once);
  CAPTURE(d.feedback);
  CHECK(d.verdict == Verdict::wrong_output);
  CHECK(contains(d.feedback, "on seed 2 of 3"));
}

TEST_CASE("env: the correctness seeds run in one worker job, each failure placed on its seed") {
  // test_env's 3 seeds, one worker job (cpu): call k of the process is seed k. The parent copies
  // each run's outputs as the worker reports the run and counts the runs made.
  auto task = starter_task("softmax_rows");
  SUBCASE("a crash in the second call is a runtime_error on seed 2") {
    auto r = eval(*task, answer(softmax_code("  static int calls = 0;\n  if (++calls == 2) *(volatile int*)nullptr = 1;\n"),
                                kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::runtime_error);
    CHECK(contains(r.feedback, "SIGSEGV"));
    CHECK(contains(r.feedback, "on seed 2 of 3"));
  }
  SUBCASE("a second call that never returns is a timeout on seed 2, within one run's limit") {
    auto r = eval(*task, answer(softmax_code("  static int calls = 0;\n  if (++calls == 2) for (volatile int i = 0;; ) { (void)i; }\n"),
                                kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::timeout);
    CHECK(contains(r.feedback, "within 2 s"));  // the run's own limit, counted from its start
    CHECK(contains(r.feedback, "on seed 2 of 3"));
  }
  SUBCASE("calls that each sleep under the idle allowance are stopped once the seeds' idle sums past it") {
    // 6 s a call against an allowance of 10 s + 10% of the 2-s limit: each run alone is within
    // it, so 3 seeds (and the timing job after them) held a grader that long (a red team's 9 s
    // a call took 62 s); the allowance is the job's, so seed 2 ends it.
    auto r = eval(*task, answer(softmax_code("  usleep(6000000);\n"), kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::timeout);
    CHECK(contains(r.feedback, "neither computing nor waiting for a CPU"));
    CHECK(contains(r.feedback, "on seed 2 of 3"));
  }
  SUBCASE("outputs left unwritten in the third call are wrong on seed 3") {
    auto r = eval(*task, answer(softmax_code("  static int calls = 0;\n  if (++calls == 3) return;\n"), kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::wrong_output);
    CHECK(contains(r.feedback, "on seed 3 of 3"));
    CHECK(r.details.at("seed") == "2");
    CHECK(r.details.at("mismatches") == "8192");
  }
  SUBCASE("a seed's outputs are taken when its run ends: written one call late, seed 1 is wrong") {
    // Call k computes call k-1's softmax (pointers kept from the previous call) into its outputs,
    // which the worker's shared memory still holds; read at the end of the job, seeds 1 and 2
    // would pass.
    const std::string lag = softmax_code(
        "  static const float* px = nullptr; static float* py = nullptr;\n"
        "  const float* cx = x; float* cy = y;\n"
        "  if (!px) { px = cx; py = cy; return; }\n"
        "  x = px; y = py; px = cx; py = cy;\n");
    auto r = eval(*task, answer(lag, kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::wrong_output);
    CHECK(contains(r.feedback, "on seed 1 of 3"));
    CHECK(r.details.at("seed") == "0");
  }
  SUBCASE("an earlier seed's input written in a later call is inputs_modified on that seed") {
    const std::string later = softmax_code(
        "  static const float* first = nullptr; static int calls = 0;\n"
        "  if (!first) first = x;\n"
        "  if (++calls == 3) const_cast<float*>(first)[7] += 1.0f;\n");
    auto r = eval(*task, answer(later, kSoftmaxPlan));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::inputs_modified);
    CHECK(contains(r.feedback, "on seed 1 of 3"));
    CHECK(contains(r.feedback, "[0, 7]"));
  }
}

TEST_CASE("env: fewer warm-up + timed runs than input sets still runs every set (a correct answer stays correct)") {
  // warm-up 1 + trials 1 < 3 timing sets: every set must still run once before the check after
  // the timing loop (it used to find set 3 unwritten and call the shipped relu wrong).
  leap::test::TempDir cache;
  auto cfg = test_env(cache.path.string());
  cfg.timing.warmup = 1;
  cfg.timing.trials = 1;
  auto env = leap::cli::make_environment(cfg, "cpu");
  auto task = starter_task("relu");
  std::string sol;
  for (const auto& e : fs::directory_iterator(kStarter + "/relu/solutions"))
    if (e.path().filename().string().rfind("cpu_", 0) == 0) sol = leap::test::read_file(e.path());
  const auto r = env->verifier->evaluate(*task, sol);
  CAPTURE(r.feedback);
  CHECK(r.verdict == Verdict::correct);
}

TEST_CASE("env: each seed of the correctness job has one run's time limit, not a pooled one") {
  // env.run_timeout_s 0.5 and 3 seeds; each of the first 3 calls of a process spins 0.3 s of CPU
  // before computing. Within each run's limit (and the timing job's, which covers its fewest
  // runs), so correct; a limit pooled over the seeds' job (0.5 s, or a run's limit counted from
  // the job's start) would stop it in seed 2.
  leap::test::TempDir cache;
  auto cfg = test_env(cache.path.string());
  cfg.run_timeout_s = 0.5;
  auto env = leap::cli::make_environment(cfg, "cpu");
  auto task = starter_task("softmax_rows");
  const std::string slow_first = answer(
      "#include <ctime>\n" +
          softmax_code("  static int calls = 0;\n"
                       "  if (++calls <= 3) {\n"
                       "    timespec a{}, b{}; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);\n"
                       "    do clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b); while ((b.tv_sec - a.tv_sec) + 1e-9 * (b.tv_nsec - a.tv_nsec) < 0.3);\n"
                       "  }\n"),
      kSoftmaxPlan);
  const auto r = env->verifier->evaluate(*task, slow_first);
  CAPTURE(r.feedback);
  CHECK(r.verdict == Verdict::correct);
}

TEST_CASE("env: a speedup above the suspicious threshold is re-measured and flagged") {
  auto task = starter_task("softmax_rows");
  auto opts = shared().env->verifier->options();
  opts.suspicious_speedup = 1e-6;  // every speedup is "suspicious"
  Verifier v(shared().env->backend, shared().env->pool, opts);
  auto r = v.evaluate(*task, leap::test::read_file(kStarter + "/softmax_rows/solutions/cpu_rows.md"));
  CAPTURE(r.feedback);
  CHECK(r.verdict == Verdict::correct);
  CHECK(r.suspicious);
  CHECK(r.details.count("suspicious") == 1);
  CHECK(contains(r.feedback, "suspicious"));
}

TEST_CASE("env: a task whose sizes need more memory than a task may have is refused naming the file and key") {
  // A red team's sizes_cpu {B: 1e8, N: 1e8} failed with LibTorch's allocation error and a
  // backtrace, naming no file; 2^32 x 2^32 overflows int64.
  leap::test::TempDir dir;
  auto write = [&](const std::string& name, const std::string& sizes_cpu) {
    dir.write(name + "/task.yaml", "name: " + name + "\nsizes: {B: 16, N: 1024}\nsizes_cpu: " + sizes_cpu + R"(
inputs:
  x: {dtype: float32, shape: [B, N]}
outputs:
  y: {dtype: float32, shape: [B, N]}
reference:
  torchscript: |
    def reference(x: Tensor) -> Tensor:
        return torch.relu(x)
)");
    return (dir.path / name).string();
  };
  for (const char* sizes : {"{B: 100000000, N: 100000000}", "{B: 4294967296, N: 4294967296}"}) {
    const std::string path = write("huge", sizes);
    try {
      RuntimeTask task(leap::tasks::load_task(path), "cpu");
      FAIL("a task of " << sizes << " was accepted");
    } catch (const leap::Error& e) {
      const std::string m = e.what();
      CAPTURE(m);
      CHECK(m.find(path + "/task.yaml: key 'sizes_cpu'") != std::string::npos);
      CHECK(m.find("GB of inputs and outputs") != std::string::npos);
      CHECK(m.find('\n') == std::string::npos);
    }
  }
  CHECK_NOTHROW(RuntimeTask(leap::tasks::load_task(write("fine", "{B: 64, N: 4096}")), "cpu"));
}

TEST_CASE("env: an all-zeros softmax over 100,000 columns fails (scale-aware tolerance)") {
  leap::test::TempDir dir;
  dir.write("wide/task.yaml", R"(name: softmax_wide
sizes: {B: 2, N: 100000}
inputs:
  x: {dtype: float32, shape: [B, N], init: {normal: {mean: 0, std: 1}}}
outputs:
  y: {dtype: float32, shape: [B, N]}
reference:
  torchscript: |
    def reference(x: Tensor) -> Tensor:
        return torch.softmax(x, dim=1)
tolerance: {atol: 1.0e-5, rtol: 1.0e-4}
)");
  RuntimeTask task(leap::tasks::load_task((dir.path / "wide").string()), "cpu");
  // The outputs are ~1e-5: a plain |out - ref| <= atol test would accept zeros everywhere.
  auto zeros = eval(task, answer("#include <cstdint>\n#include <cstring>\n"
                                 "extern \"C\" void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {\n"
                                 "  std::memset(y, 0, sizeof(float) * rows * cols);\n}\n",
                                 kSoftmaxPlan));
  CAPTURE(zeros.feedback);
  CHECK(zeros.verdict == Verdict::wrong_output);
  auto ok = eval(task, answer(softmax_code(""), kSoftmaxPlan));
  CAPTURE(ok.feedback);
  CHECK(ok.verdict == Verdict::correct);
}

TEST_CASE("env: integer outputs are compared exactly in their own dtype, above 2^53 too") {
  // (int64_t)(double)(x + 1) for x near 2^60 differs from x + 1 in its low bits: through double
  // the two compared equal, and a red team's wrong answer was `correct` (2026-12-08).
  const int64_t base = int64_t{1} << 60;
  torch::Tensor ref = torch::arange(base, base + 1000, torch::kInt64) + 1;
  torch::Tensor got = ref.clone();
  got[5] = got[5].item<int64_t>() + 1;
  got[9] = got[9].item<int64_t>() - 3;
  REQUIRE(static_cast<double>(got[5].item<int64_t>()) == static_cast<double>(ref[5].item<int64_t>()));
  const auto c = compare_output(got, ref, 1e-4, 1e-4);
  CHECK_FALSE(c.ok);
  CHECK(c.mismatches == 2);
  CHECK(c.first_bad == 5);
  CHECK(c.max_abs_error > 0);
  CHECK(compare_output(ref.clone(), ref, 1e-4, 1e-4).ok);
  torch::Tensor small = torch::arange(0, 100, torch::kInt32);
  torch::Tensor off = small.clone();
  off[3] = 4;
  const auto s = compare_output(off, small, 1e-4, 1e-4);
  CHECK(s.mismatches == 1);
  CHECK(s.max_abs_error == 1.0);
  CHECK(s.first_bad == 3);
}

TEST_CASE("env: compare_output is scale-aware") {
  torch::Tensor ref = torch::full({100000}, 1.0e-5);
  ref[0] = 2.0e-5;
  CHECK_FALSE(compare_output(torch::zeros_like(ref), ref, 1e-5, 1e-4).ok);
  CHECK(compare_output(ref * (1 + 1e-6), ref, 1e-5, 1e-4).ok);
  torch::Tensor big = torch::randn({1000}) * 100;
  CHECK(compare_output(big + 1e-5, big, 1e-4, 1e-4).ok);
  torch::Tensor nan = big.clone();
  nan[7] = NAN;
  auto c = compare_output(nan, big, 1e-4, 1e-4);
  CHECK_FALSE(c.ok);
  CHECK(c.first_bad == 7);
  CHECK(c.mismatches == 1);
  torch::Tensor idx = torch::arange(10);
  CHECK(compare_output(idx, idx, 0, 0).ok);
  CHECK_FALSE(compare_output(idx + 1, idx, 0.5, 0).ok);
}

TEST_CASE("env: every starter cpu solution is correct") {
  auto set = leap::tasks::load_task_set(kStarter);
  int checked = 0;
  std::vector<std::unique_ptr<RuntimeTask>> tasks;
  std::vector<leap::cli::GradeJob> jobs;
  for (const auto& spec : set.tasks) {
    tasks.push_back(std::make_unique<RuntimeTask>(spec, "cpu"));
    for (const auto& e : fs::directory_iterator(fs::path(spec.dir) / "solutions")) {
      std::string n = e.path().filename().string();
      if (n.rfind("cpu_", 0) == 0 && e.path().extension() == ".md")
        jobs.push_back({tasks.back().get(), e.path().string(), leap::test::read_file(e.path())});
    }
  }
  // Correctness only (timing is covered above): the same seeds and checks, fewer seconds.
  auto opts = shared().env->verifier->options();
  opts.timing = false;
  Verifier v(shared().env->backend, shared().env->pool, opts);
  auto results = leap::cli::grade_all(v, jobs, 2);
  for (size_t i = 0; i < jobs.size(); ++i) {
    CAPTURE(jobs[i].file);
    CAPTURE(results[i].feedback);
    CHECK(results[i].verdict == Verdict::correct);
    ++checked;
  }
  CHECK(checked >= 29);
}

TEST_CASE("env: the cpu reference's time is its call alone, not the cloning of its inputs") {
  // A reference that reads one column of a 64-MiB input: cloning the input took 35 ms where the
  // call takes ~0.05 ms, and an honest column copy was paid 377x (a tester, 2026-12-07).
  leap::test::TempDir dir;
  dir.write("col/task.yaml", R"(name: first_column
sizes: {B: 4096, N: 4096}
sizes_cpu: {B: 4096, N: 4096}
inputs:
  x: {dtype: float32, shape: [B, N], init: {normal: {mean: 0, std: 1}}}
outputs:
  y: {dtype: float32, shape: [B]}
reference:
  torchscript: |
    def reference(x: Tensor) -> Tensor:
        return x[:, 0].contiguous()
tolerance: {atol: 1.0e-5, rtol: 1.0e-5}
)");
  RuntimeTask task(leap::tasks::load_task((dir.path / "col").string()), "cpu");
  const std::string code =
      "#include <cstdint>\n"
      "extern \"C\" void first_column(const float* x, float* y, int64_t B, int64_t N) {\n"
      "  for (int64_t b = 0; b < B; ++b) y[b] = x[b * N];\n}\n";
  auto r = eval(task, answer(code, "launches:\n  - kernel: first_column\n    args: [x, y, B, N]\n"));
  CAPTURE(r.feedback);
  REQUIRE(r.verdict == Verdict::correct);
  // A 64-MiB clone is milliseconds on any machine; the call is tens of microseconds.
  CHECK(r.reference_ms < 2.0);
  CHECK(r.speedup < 9.0);  // not flagged: the honest copy is about as fast as the reference
}

TEST_CASE("env: the feedback names the reference's trial count when the time box gave it fewer") {
  // A tester (2026-12-07): "median of 2 trials" where the reference's time rested on one call.
  leap::test::TempDir dir;
  dir.write("slow/task.yaml", R"(name: slow_copy
sizes: {N: 1024}
inputs:
  x: {dtype: float32, shape: [N], init: {normal: {mean: 0, std: 1}}}
outputs:
  y: {dtype: float32, shape: [N]}
reference:
  torchscript: |
    def reference(x: Tensor) -> Tensor:
        y = x.clone()
        for i in range(20000):
            y = y + 0.0
        return y
tolerance: {atol: 1.0e-5, rtol: 1.0e-5}
)");
  RuntimeTask task(leap::tasks::load_task((dir.path / "slow").string()), "cpu");
  leap::test::TempDir cache;
  leap::config::EnvConfig e = test_env(cache.path.string());
  e.seeds = 1;
  e.timing.trials = 8;
  e.timing.max_seconds = 0.02;  // the reference's ~20000 ops take far longer: its first runs spend the box
  auto env = leap::cli::make_environment(e, "cpu");
  const std::string code = "#include <cstdint>\nextern \"C\" void copy(const float* x, float* y, int64_t n) {\n"
                           "  for (int64_t i = 0; i < n; ++i) y[i] = x[i];\n}\n";
  auto r = env->verifier->evaluate(task, answer(code, "launches:\n  - kernel: copy\n    args: [x, y, N]\n"));
  CAPTURE(r.feedback);
  REQUIRE(r.verdict == Verdict::correct);
  CHECK(contains(r.feedback, "(median of 8 trials; of the reference: "));
}

TEST_CASE("env: a cpu plan's scratch is held to 256 MiB and to env.worker_memory_mb") {
  // A red team's unused 4-GiB scratch cost 20-29 s and 4 GB of the grader's memory, whatever
  // env.worker_memory_mb said (2026-12-07): scratch is mapped by the grader and zero-filled by it.
  // At a 1-GiB cap, an unused 1-GiB scratch still cost 9-21 s (2026-12-08).
  auto task = starter_task("relu");
  const std::string good = leap::test::read_file(kStarter + "/relu/solutions/cpu_loop.md");
  const auto with_scratch = [&](int64_t floats) {
    std::string a = good;
    const size_t at = a.find("```yaml\n");
    REQUIRE(at != std::string::npos);
    return a.insert(at + 8, "scratch:\n  pad: {dtype: float32, shape: [" + std::to_string(floats) + "]}\n");
  };
  auto over = eval(*task, with_scratch((int64_t(1) << 26) + 1));  // 256 MiB + 4 bytes
  CAPTURE(over.feedback);
  CHECK(over.verdict != Verdict::correct);
  CHECK(contains(over.feedback, "more than the limit of 268435456"));
  CHECK(contains(over.feedback, "env.worker_memory_mb"));
  leap::test::TempDir cache;
  leap::config::EnvConfig small = test_env(cache.path.string());
  small.worker_memory_mb = 64;
  auto env = leap::cli::make_environment(small, "cpu");
  auto refused = env->verifier->evaluate(*task, with_scratch(int64_t(1) << 25));  // 128 MiB
  CAPTURE(refused.feedback);
  CHECK(refused.verdict != Verdict::correct);
  CHECK(contains(refused.feedback, "more than the limit of 67108864"));
  auto fits = env->verifier->evaluate(*task, with_scratch(int64_t(1) << 20));  // 4 MiB
  CAPTURE(fits.feedback);
  CHECK(fits.verdict == Verdict::correct);
}

TEST_CASE("env: an answer may pack the problem's weights once, whether the task stores them seeded or in a file") {
  // A red team (2026-12-07): packing the weight on the first call was judged wrong when the
  // weight was a seeded fixed value (rewritten between timed calls) and correct from a file.
  leap::test::TempDir dir;
  const std::string head = R"(sizes: {M: 32, K: 64, N: 48}
inputs:
  x: {dtype: float32, shape: [M, K], init: {normal: {mean: 0, std: 1}}}
)";
  const std::string tail = R"(  bias: {dtype: float32, shape: [N], init: {normal: {mean: 0, std: 0.1}}}
outputs:
  y: {dtype: float32, shape: [M, N]}
reference:
  torchscript: |
    def reference(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        return torch.nn.functional.linear(x, weight, bias)
tolerance: {atol: 1.0e-4, rtol: 1.0e-4}
)";
  dir.write("seeded/task.yaml", "name: lin_seeded\n" + head +
                                    "  weight: {dtype: float32, shape: [N, K], init: {normal: {mean: 0, std: 0.02}, seed: 7}}\n" + tail);
  dir.write("filed/task.yaml", "name: lin_file\n" + head +
                                   "  weight: {dtype: float32, shape: [N, K], init: {file: w.bin}}\n" + tail);
  {
    std::vector<float> w(48 * 64);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 0.02f * static_cast<float>(static_cast<int>(i % 17) - 8);
    std::ofstream(dir.path / "filed" / "w.bin", std::ios::binary)
        .write(reinterpret_cast<const char*>(w.data()), static_cast<std::streamsize>(w.size() * sizeof(float)));
  }
  const std::string code =
      "#include <cstdint>\n#include <vector>\n"
      "extern \"C\" void linear(const float* x, const float* w, const float* b, float* y, int64_t M, int64_t K, int64_t N) {\n"
      "  static std::vector<float> wt;  // the weight as K x N, packed on the first call\n"
      "  if (wt.empty()) { wt.resize(K * N); for (int64_t n = 0; n < N; ++n) for (int64_t k = 0; k < K; ++k) wt[k * N + n] = w[n * K + k]; }\n"
      "  for (int64_t m = 0; m < M; ++m) {\n"
      "    float* yr = y + m * N;\n"
      "    for (int64_t n = 0; n < N; ++n) yr[n] = b[n];\n"
      "    for (int64_t k = 0; k < K; ++k) { const float a = x[m * K + k]; for (int64_t n = 0; n < N; ++n) yr[n] += a * wt[k * N + n]; }\n"
      "  }\n}\n";
  const std::string text = answer(code, "launches:\n  - kernel: linear\n    args: [x, weight, bias, y, M, K, N]\n");
  for (const char* name : {"seeded", "filed"}) {
    CAPTURE(name);
    RuntimeTask task(leap::tasks::load_task((dir.path / name).string()), "cpu");
    auto r = eval(task, text);
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::correct);
  }
}

TEST_CASE("env: the weak-task detector flags references that ignore inputs or that trivial kernels pass") {
  leap::test::TempDir dir;
  auto make = [&](const std::string& name, const std::string& init, const std::string& body) {
    dir.write(name + "/task.yaml", "name: " + name + R"(
sizes: {N: 512}
inputs:
  x: {dtype: float32, shape: [N], init: )" + init + R"(}
  w: {dtype: float32, shape: [N], init: {normal: {mean: 0, std: 1}}}
outputs:
  y: {dtype: float32, shape: [N]}
reference:
  torchscript: |
    def reference(x: Tensor, w: Tensor) -> Tensor:
        return )" + body + R"(
tolerance: {atol: 1.0e-4, rtol: 1.0e-4}
)");
    return std::make_unique<RuntimeTask>(leap::tasks::load_task((dir.path / name).string()), "cpu");
  };
  VerifierOptions o;
  o.seeds = 3;
  auto kinds = [&](const RuntimeTask& t) {
    std::set<std::string> k;
    for (const auto& w : find_weaknesses(t, o)) k.insert(w.kind);
    return k;
  };
  auto honest = make("honest", "{normal: {mean: 0, std: 1}}", "x * w");
  CHECK(kinds(*honest).empty());
  auto ignores = make("ignores", "{normal: {mean: 0, std: 1}}", "x * 2.0");
  CHECK(kinds(*ignores).count("ignores_input"));
  // An input whose effect stays far inside the tolerance is ignorable too, though the outputs are
  // not bit-identical (3_DeepNarrowMLP's x moves its output by 2e-9).
  auto faint = make("faint", "{normal: {mean: 0, std: 1}}", "x * 2.0 + w * 1.0e-7");
  CHECK(kinds(*faint).count("ignores_input"));
  auto zeros = make("zeros", "{normal: {mean: 0, std: 1}}", "torch.zeros_like(x) * w");
  CHECK(kinds(*zeros).count("zeros_pass"));
  CHECK(kinds(*zeros).count("ignores_input"));
  // relu on strictly positive inputs is the identity: a copy of x passes.
  auto identity = make("identity", "{uniform: {low: 0, high: 1}, strict: true}", "torch.relu(x) + w * 0.0");
  CHECK(kinds(*identity).count("copy_pass"));
  // A tiny constant output.
  auto constant = make("constant", "{normal: {mean: 0, std: 1}}", "torch.ones_like(x) * 1.0e-3 + (x * w) * 1.0e-9");
  CHECK(kinds(*constant).count("constant_pass"));
  CHECK_FALSE(kinds(*constant).count("constant_input"));
  // A weight of ones on every seed (a KernelBench norm layer's): an answer ignoring it passes.
  auto ones = make("ones", "{normal: {mean: 1, std: 0}, seed: 5}", "x * w");
  CHECK(kinds(*ones).count("constant_input"));
  CHECK_FALSE(kinds(*honest).count("constant_input"));
}

TEST_CASE("env: validate flags a reference with a baked-in device (a KernelBench trace made on the CPU)") {
  leap::test::TempDir dir;
  const std::string head = "prompt: add ones\nsizes: {N: 64}\ninputs:\n  x: {dtype: float32, shape: [N], init: {normal: {mean: 0, std: 1}}}\n"
                           "outputs:\n  y: {dtype: float32, shape: [N]}\n";
  VerifierOptions o;
  o.seeds = 2;
  auto baked = [&](const std::string& name) {
    RuntimeTask t(leap::tasks::load_task((dir.path / "set" / name).string()), "cpu");
    std::string detail;
    for (const auto& w : find_weaknesses(t, o))
      if (w.kind == "baked_device") detail = w.detail;
    return detail;
  };
  // TorchScript source that names the CPU, and the same written on the inputs' device.
  dir.write("set/source_cpu/task.yaml", "name: source_cpu\n" + head +
                                            "reference:\n  torchscript: |\n    def reference(x: Tensor) -> Tensor:\n"
                                            "        return x + torch.ones(x.size(), device=torch.device(\"cpu\"))\n");
  dir.write("set/source_ok/task.yaml", "name: source_ok\n" + head +
                                           "reference:\n  torchscript: |\n    def reference(x: Tensor) -> Tensor:\n"
                                           "        return x + torch.ones(x.size(), device=x.device)\n");
  CHECK(contains(baked("source_cpu"), "device 'cpu' in aten::ones"));
  CHECK(baked("source_ok").empty());
  // A module traced on the CPU (what KernelBench's import writes): device=x.device becomes 'cpu'.
  const std::string py = leap_test_python();
  const std::string script = "import sys, torch\n"
                             "class M(torch.nn.Module):\n"
                             "    def forward(self, x):\n"
                             "        return x + torch.ones(x.shape, device=x.device)\n"
                             "torch.jit.trace(M(), torch.randn(64)).save(sys.argv[1])\n";
  const std::string script_file = dir.write("trace.py", script);
  const std::string pt = (dir.path / "set" / "traced" / "reference.pt").string();
  fs::create_directories(dir.path / "set" / "traced");
  REQUIRE(std::system(("'" + py + "' '" + script_file + "' '" + pt + "' >/dev/null 2>&1").c_str()) == 0);
  dir.write("set/traced/task.yaml", "name: traced\n" + head + "reference:\n  file: reference.pt\n");
  CHECK(contains(baked("traced"), "device 'cpu' in aten::ones"));
  // leap tasks validate names it and exits 1.
  auto r = leap::test::run_leap("tasks validate " + (dir.path / "set").string() + " --set env.cache_dir=" +
                                shared().cache.path.string() + " --set env.seeds=2");
  CAPTURE(r.out);
  CHECK(r.rc == 1);
  CHECK(contains(r.out, "WEAK baked_device"));
  CHECK(contains(r.out, "3 tasks: 2 with problems"));
}

TEST_CASE("env: leap tasks validate tasks/starter reports no weak task and every cpu solution correct") {
  // Same flags and cache as the tests above, so the compiles are cache hits.
  std::string c = shared().cache.path.string();
  auto r = leap::test::run_leap("tasks validate tasks/starter --set env.cache_dir=" + c +
                                " --set 'env.cpu.flags=" + kFastFlags + "' --set env.seeds=3");
  CAPTURE(r.out);
  CAPTURE(r.err);
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "29 tasks: 0 with problems, 0 weak; "));
  // Every cuda solution is compiled with NVRTC and bound (no GPU needed), none skipped.
  CHECK(contains(r.out, "29 cuda solutions compile"));
  CHECK(contains(r.out, "0 cuda solutions skipped"));
  CHECK_FALSE(contains(r.out, "WEAK"));
}

TEST_CASE("env: leap tasks validate flags a weak synthetic task and exits 1") {
  leap::test::TempDir dir;
  dir.write("set/zeros/task.yaml", R"(name: zeros
sizes: {N: 64}
inputs:
  x: {dtype: float32, shape: [N], init: {normal: {mean: 0, std: 1}}}
outputs:
  y: {dtype: float32, shape: [N]}
reference:
  torchscript: |
    def reference(x: Tensor) -> Tensor:
        return x * 0.0
)");
  std::string c = shared().cache.path.string();
  auto r = leap::test::run_leap("tasks validate " + (dir.path / "set").string() + " --set env.cache_dir=" + c);
  CAPTURE(r.out);
  CHECK(r.rc == 1);
  CHECK(contains(r.out, "WEAK zeros_pass"));
  CHECK(contains(r.out, "WEAK ignores_input"));
  CHECK(contains(r.out, "NO PROMPT"));  // no `prompt:`: the model would be shown nothing

  // Two broken task.yaml files: both are reported (file:line and key), the loadable task is still
  // checked, and the exit status is 2 (a malformed task file is a config error).
  dir.write("set/bad_dtype/task.yaml", "name: bad_dtype\nsizes: {N: 4}\ninputs:\n  x: {dtype: float33, shape: [N]}\n"
                                       "outputs:\n  y: {dtype: float32, shape: [N]}\n");
  dir.write("set/bad_key/task.yaml", "name: bad_key\nsizez: {N: 4}\n");
  auto b = leap::test::run_leap("tasks validate " + (dir.path / "set").string() + " --set env.cache_dir=" + c);
  CAPTURE(b.out);
  CHECK(b.rc == 2);
  CHECK(contains(b.out, "bad_dtype/task.yaml:4"));
  CHECK(contains(b.out, "float33"));
  CHECK(contains(b.out, "bad_key/task.yaml:2"));
  CHECK(contains(b.out, "sizez"));
  CHECK(contains(b.out, "WEAK zeros_pass"));  // the loadable task is still validated
  CHECK(contains(b.out, "3 tasks: 3 with problems"));
}

TEST_CASE("env: without env.cache_dir the compile cache is <--results-dir>/cache/<backend>") {
  leap::test::TempDir dir;
  dir.write("sol/softmax_rows/a_good.md", leap::test::read_file(kStarter + "/softmax_rows/solutions/cpu_rows.md"));
  const fs::path results = dir.path / "res";
  auto r = leap::test::run_leap("--db " + (dir.path / "leap.db").string() + " --results-dir " + results.string() +
                                " eval --tasks tasks/starter --solutions " + (dir.path / "sol").string() +
                                " --set 'env.cpu.flags=" + kFastFlags + "' --set env.seeds=1 --set env.timing.trials=1");
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "correct"));
  size_t artifacts = 0;
  for (const auto& e : fs::directory_iterator(results / "cache" / "cpu"))
    artifacts += e.path().extension() == ".so";
  // The answer and leap's known-good probe kernel (check_compiler), in the run's results folder
  // (the no-op baseline is the worker's own, never compiled).
  CHECK(artifacts == 2);
}

TEST_CASE("env: leap eval --solutions grades files, prints rows and writes the store") {
  leap::test::TempDir dir;
  const std::string good = leap::test::read_file(kStarter + "/softmax_rows/solutions/cpu_rows.md");
  dir.write("sol/softmax_rows/a_good.md", good);
  dir.write("sol/softmax_rows/b_empty.md",
            answer("#include <cstdint>\nextern \"C\" void softmax_rows(const float* x, float* y, int64_t rows, int64_t cols) {}\n",
                   kSoftmaxPlan));
  dir.write("sol/relu/c_noblocks.md", "no code here");
  std::string db = (dir.path / "leap.db").string();
  std::string c = shared().cache.path.string();
  std::string common = " --set env.cache_dir=" + c + " --set 'env.cpu.flags=" + kFastFlags +
                       "' --set env.seeds=2 --set env.timing.trials=2 --set env.timing.warmup=1";
  auto r0 = leap::test::run_leap("--db " + db + " eval --format json --tasks tasks/starter --solutions " + (dir.path / "sol").string() + common);
  CAPTURE(r0.out);
  CHECK(contains(r0.out, "\"verdict\": \"correct\""));
  // The store holds an evaluation and no run: leap report says so (a tester read "holds no runs").
  auto rep = leap::test::run_leap("--db " + db + " report");
  CHECK(rep.rc == 2);
  CHECK(contains(rep.err, "holds no runs (it holds 1 evaluation(s) made by leap eval --solutions or --model"));
  {
    // The folders are stored absolute: the store outlives the folder the command ran in.
    leap::store::Store st(db);
    auto q = st.db().prepare("SELECT json_extract(settings_json, '$.tasks') FROM evaluations");
    REQUIRE(q.step());
    CHECK(q.column_text(0) == std::string(LEAP_SOURCE_DIR) + "/tasks/starter");
  }
  // --bench NAME is the same as --tasks DIR (a new user on KernelBench found it refused with --solutions).
  auto r = leap::test::run_leap("--db " + db + " eval --bench starter --solutions " + (dir.path / "sol").string() + common);
  CAPTURE(r.out);
  CAPTURE(r.err);
  auto both = leap::test::run_leap("--db " + db + " eval --bench starter --tasks tasks/starter --solutions " +
                                   (dir.path / "sol").string() + common);
  CHECK(both.rc == 2);
  CHECK(contains(both.err, "one of --bench NAME and --tasks DIR"));
  CAPTURE(r.err);
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "a_good.md"));
  CHECK(contains(r.out, "correct"));
  CHECK(contains(r.out, "wrong_output"));
  CHECK(contains(r.out, "format_error"));
  CHECK(contains(r.out, "3 files:"));
  auto j = leap::test::run_leap("--db " + db + " eval --format json --tasks tasks/starter --solutions " +
                                (dir.path / "sol").string() + common);
  CAPTURE(j.out);
  CHECK(j.rc == 0);
  CHECK(contains(j.out, "\"verdict\": \"wrong_output\""));
  CHECK(contains(j.out, "\"verdict\": \"correct\""));
  {  // metrics over all 29 starter tasks: softmax_rows 1 of 2 samples correct, relu 0 of 1, 27 without answers
    auto m = nlohmann::json::parse(j.out)["metrics"]["overall"];
    CHECK(m["tasks"] == 29);
    CHECK(m["acc"][0].get<double>() == doctest::Approx(0.5 / 29));
    CHECK(m["compile_rate"].get<double>() == doctest::Approx(2.0 / 3));  // the format_error did not compile
    // pass@2: softmax_rows 1 (1 of 2 correct), relu its pass@1 (0: one sample, wrong), 27 tasks 0;
    // never below pass@1 (tasks with fewer than k samples used to be left out of pass@k alone)
    CHECK(m["pass_at_k"]["pass@2"].get<double>() == doctest::Approx(1.0 / 29));
    CHECK(m["pass_at_k"]["pass@1"].get<double>() == doctest::Approx(0.5 / 29));
  }
  CHECK(contains(r.out, "acc@1"));
  {
    auto s = std::system(("sqlite3 " + db + " 'select count(*) from eval_results' > " + (dir.path / "n.txt").string() + " 2>/dev/null").c_str());
    if (s == 0) CHECK(leap::test::read_file((dir.path / "n.txt").string()).rfind("9", 0) == 0);  // 3 runs x 3 files
  }
  // An answer folder for a task that does not exist is bad input: non-zero exit.
  dir.write("sol/no_such_task/x.md", good);
  auto bad = leap::test::run_leap("--db " + db + " eval --tasks tasks/starter --solutions " + (dir.path / "sol").string() + common);
  CHECK(bad.rc != 0);
  CHECK(contains(bad.err, "no_such_task"));
}

TEST_CASE("env tolerance: KernelBench's fp32 tolerance fails TF32 and bf16 GEMMs but not fp32 in another order") {
  // KernelBench's fp32 level (1e-4, scale-aware) as the anchor: a kernel that reaches its
  // speedup by multiplying in TF32 or bf16 fails it, an fp32 kernel in any summation order passes
  // (docs/env.md "Tolerances by task kind"). Checked on the five starter GEMM tasks with their
  // declared tolerance and their GPU-sized reduction (K of `sizes`; rows and columns cut to 64
  // so the CPU can do it in double), and on matmul_square at its cpu size.
  using Epilogue = std::function<torch::Tensor(const torch::Tensor&, const std::vector<torch::Tensor>&)>;
  struct Gemm {
    std::string task;
    std::set<std::string> operands;        // the GEMM's inputs (what a TF32 / bf16 kernel rounds)
    bool gpu_sizes = true;                 // `sizes` (the GPU's), else `sizes_cpu`
    std::map<std::string, int64_t> small;  // sides cut down, the reduction kept
    bool square = false;  // matmul_square: N is the reduction and both sides; A's rows and B's columns are cut to 64
    bool linear = false;  // operands x [M, K] and weight [N, K] (else A [.., M, K] and B [.., K, N])
    Epilogue epilogue;    // what the task does after the product (bias, GELU, residual)
  };
  const Epilogue none = [](const torch::Tensor& acc, const std::vector<torch::Tensor>&) { return acc; };
  const Epilogue bias = [](const torch::Tensor& acc, const std::vector<torch::Tensor>& x) { return acc + x[2]; };
  const Epilogue gelu = [](const torch::Tensor& acc, const std::vector<torch::Tensor>& x) { return torch::gelu(acc + x[2]); };
  const Epilogue residual = [](const torch::Tensor& acc, const std::vector<torch::Tensor>& x) {
    return x[3] + 0.5 * (acc + x[2]);
  };
  const std::map<std::string, int64_t> sides = {{"M", 64}, {"N", 64}};
  const std::vector<Gemm> gemms = {
      {"matmul_square", {"A", "B"}, false, {}, false, false, none},  // its cpu size, N = 128
      {"matmul_square", {"A", "B"}, true, {}, true, false, none},    // [64, 4096] x [4096, 64]
      {"batched_matmul", {"A", "B"}, true, {{"BT", 2}, {"M", 64}, {"N", 64}}, false, false, none},
      {"linear_bias", {"x", "weight"}, true, sides, false, true, bias},
      {"linear_bias_gelu", {"x", "weight"}, true, sides, false, true, gelu},
      {"linear_scale_residual", {"x", "weight"}, true, sides, false, true, residual},
  };
  auto tf32 = [](const torch::Tensor& x) {
    auto bits = x.contiguous().view(torch::kInt32);
    return torch::bitwise_and(bits + 0x1000, static_cast<int64_t>(~0x1FFF)).view(torch::kFloat);
  };
  auto bf16 = [](const torch::Tensor& x) { return x.to(torch::kBFloat16).to(torch::kFloat); };
  for (const auto& g : gemms) {
    leap::tasks::TaskSpec spec = leap::tasks::load_task(kStarter + "/" + g.task);
    CAPTURE(g.task);
    // The tolerance the task declares is KernelBench's fp32 level.
    CHECK(spec.tolerance.atol <= 1e-4);
    CHECK(spec.tolerance.rtol <= 1e-4);
    CAPTURE(g.gpu_sizes);
    if (g.gpu_sizes) {  // the GPU's sizes with the sides cut
      auto& over = spec.size_overrides["cpu"];
      over.clear();
      for (const auto& [k, v] : spec.sizes) over[k] = v;
      for (const auto& [k, v] : g.small) over[k] = v;
    }
    RuntimeTask task(spec, "cpu");
    std::vector<torch::Tensor> in = make_inputs(task, 7, 0);
    if (g.square) {
      in[0] = in[0].narrow(0, 0, 64).contiguous();
      in[1] = in[1].narrow(1, 0, 64).contiguous();
    }
    // The reference's formula on any dtype (for the reshaped square matmul, its own formula).
    auto formula = [&](const std::vector<torch::Tensor>& x) {
      if (g.square) return torch::matmul(x[0], x[1]);
      return task.reference().call(std::vector<c10::IValue>(x.begin(), x.end())).at(0);
    };
    const torch::Tensor ref = g.square ? formula(in) : task.reference().run(task, in).at(0);  // fp32, TF32 off
    const double rms = finite_rms(ref);
    auto passes = [&](const torch::Tensor& got) {
      return compare_output(got.to(torch::kFloat), ref, spec.tolerance.atol, spec.tolerance.rtol, rms).ok;
    };
    auto rounded = [&](auto round) {
      std::vector<torch::Tensor> x = in;
      for (size_t i = 0; i < x.size(); ++i)
        if (g.operands.count(spec.inputs[i].name)) x[i] = round(x[i]);
      return x;
    };
    // fp32 in another summation order passes: double accumulation rounded once, and a naive fp32
    // loop over the reduction (two roundings per step, as a simple tiled kernel or worse).
    std::vector<torch::Tensor> in64;
    for (const auto& x : in) in64.push_back(x.to(torch::kDouble));
    CHECK(passes(formula(in64)));
    {
      const torch::Tensor a = in[0], b = g.linear ? in[1].t() : in[1];
      torch::Tensor acc = torch::zeros_like(torch::matmul(a.narrow(-1, 0, 1), b.narrow(-2, 0, 1)));
      for (int64_t k = 0; k < a.size(-1); ++k) acc = acc + a.narrow(-1, k, 1) * b.narrow(-2, k, 1);
      CHECK(passes(g.epilogue(acc, in)));
    }
    // TF32 operands (10-bit mantissa), accumulated exactly: fails. bf16 operands: fails.
    for (const auto& [name, round] : {std::pair<const char*, std::function<torch::Tensor(const torch::Tensor&)>>{"tf32", tf32},
                                      {"bf16", bf16}}) {
      CAPTURE(name);
      std::vector<torch::Tensor> x = rounded(round);
      std::vector<torch::Tensor> x64;
      for (const auto& t : x) x64.push_back(t.to(torch::kDouble));
      CHECK_FALSE(passes(formula(x64)));
    }
  }
}
