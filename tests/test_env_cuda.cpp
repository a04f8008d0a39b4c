// Tests of the cuda backend: NVRTC compilation, the compile cache, and the launch-plan checks run
// here without a GPU; the tests that launch kernels need a GPU and its driver. Without one they
// print "LEAP-SKIP: ..." and return, which CTest reports as Skipped (SKIP_REGULAR_EXPRESSION in
// CMakeLists.txt), never as Passed.
#include <doctest/doctest.h>
#include <torch/torch.h>

#if LEAP_HAVE_NVRTC

#include <cmath>
#include <cstdio>
#include <utility>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "cli/environment.hpp"
#include "config/experiment.hpp"
#include "env/binding.hpp"
#include "env/cuda_backend.hpp"
#include "env/cuda_driver.hpp"
#include "env/errors.hpp"
#include "env/extract.hpp"
#include "env/launch_plan.hpp"
#include "env/nvrtc_compiler.hpp"
#include "env/shared_buffers.hpp"
#include "env/task_runtime.hpp"
#include "env/verifier.hpp"
#include "env/worker_pool.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using namespace leap::env;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("env");

namespace {

const std::string kStarter = std::string(LEAP_SOURCE_DIR) + "/tasks/starter";

// One worker, a 5 s job limit, `max_jobs` jobs per worker process.
PoolOptions one_worker_pool(int max_jobs) {
  PoolOptions o;
  o.workers = 1;
  o.run_timeout_s = 5.0;
  o.max_jobs_per_worker = max_jobs;
  return o;
}

RunRequest timed_request(int warmup, int trials) {
  RunRequest r;
  r.warmup = warmup;
  r.trials = trials;
  return r;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::shared_ptr<CudaBackend> compile_only_backend(const std::string& cache_dir) {
  CudaBackendOptions o;
  o.nvrtc.cache_dir = cache_dir;
  o.require_device = false;
  return std::make_shared<CudaBackend>(o);
}

std::string cuda_answer(const std::string& code, const std::string& plan) {
  return "My kernel:\n\n```cuda\n" + code + "```\n\n```yaml\n" + plan + "```\n";
}

// The GPU, probed once; nullopt (with the reason) when there is none.
const std::optional<CudaDeviceInfo>& gpu(std::string* why = nullptr) {
  static std::string reason;
  static std::optional<CudaDeviceInfo> info = probe_cuda_device(0, &reason);
  if (why) *why = reason;
  return info;
}

// True (after printing the CTest skip marker) when this machine has no usable GPU.
bool skip_without_gpu() {
  std::string why;
  if (gpu(&why)) return false;
  std::printf("LEAP-SKIP: needs an NVIDIA GPU and its driver (%s)\n", why.c_str());
  std::fflush(stdout);
  return true;
}

leap::config::EnvConfig gpu_env(const std::string& cache_dir) {
  leap::config::EnvConfig e;
  e.workers = 2;
  e.seeds = 2;
  e.run_timeout_s = 5.0;
  e.cache_dir = cache_dir;
  e.timing.warmup = 1;
  e.timing.trials = 5;
  e.timing.max_seconds = 0.5;
  return e;
}

TaskInterface vadd_task(int64_t n) {
  TaskInterface t;
  t.inputs = {{"a", DType::float32, {"N"}}, {"b", DType::float32, {"N"}}};
  t.outputs = {{"c", DType::float32, {"N"}}};
  t.sizes = {{"N", n}};
  t.constants = {{"scale", 2.0, ScalarType::float32}, {"shift", 0.25, ScalarType::float64}};
  return t;
}

const char* kVaddCode =
    "extern \"C\" __global__ void vadd(const float* a, const float* b, float* c, long long n, float scale,\n"
    "                                  double shift) {\n"
    "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
    "  if (i < n) c[i] = scale * (a[i] + b[i]) + (float)shift;\n"
    "}\n";
// The TorchScript reference of vadd_task (scale 2, shift 0.25).
const char* kVaddReference = "def reference(a: Tensor, b: Tensor) -> Tensor:\n    return 2.0 * (a + b) + 0.25\n";
const char* kVaddPlan =
    "launches:\n  - kernel: vadd\n    grid: [ceil_div(N, 256)]\n    block: [256]\n    args: [a, b, c, N, scale, shift]\n";

}  // namespace

TEST_CASE("env cuda: NVRTC compiles every starter cuda solution to CUBIN with its kernels") {
  leap::test::TempDir dir;
  auto backend = compile_only_backend(dir.path.string());
  // On a GPU the target is the architecture NVRTC compiles for it (sm_90a on Hopper: the
  // architecture-specific features, wgmma and setmaxnreg, need the "a" target).
  CHECK(backend->arch() == (gpu() ? nvrtc_arch_for(gpu()->cc_major, gpu()->cc_minor) : std::string("sm_90")));
  auto set = leap::tasks::load_task_set(kStarter);
  int compiled = 0, tasks_with_cuda = 0;
  for (const auto& spec : set.tasks) {
    RuntimeTask rt(spec, "cuda");
    bool any = false;
    for (const auto& e : fs::directory_iterator(fs::path(spec.dir) / "solutions")) {
      if (e.path().filename().string().rfind("cuda_", 0) != 0) continue;
      any = true;
      CAPTURE(e.path().string());
      ExtractedAnswer ans = extract_answer(leap::test::read_file(e.path()), CodeLanguage::cuda);
      PlanParseOptions po = backend->plan_options();
      po.line_offset = ans.plan_line - 1;
      LaunchPlan plan = parse_launch_plan(ans.plan_yaml, rt.interface(), po);
      CompileOutcome c = backend->compile(ans.code, plan);
      REQUIRE_MESSAGE(c.ok, c.feedback);
      CHECK_FALSE(c.artifact.from_cache);
      CHECK(c.artifact.backend == "cuda");
      const std::string cubin = leap::test::read_file(c.artifact.path);
      CHECK(is_elf(cubin));
      CHECK(cubin_kernel_names(cubin) == c.artifact.exports);
      for (const auto& l : plan.launches) CHECK_MESSAGE(c.artifact.exports.count(l.kernel) == 1, l.kernel);
      // The plan binds at the task's cuda sizes against the kernels and the launch limits.
      CHECK_NOTHROW(bind_plan(plan, rt.interface(), backend->limits(), &c.artifact.exports));
      ++compiled;
    }
    tasks_with_cuda += any;
  }
  CHECK(tasks_with_cuda == static_cast<int>(set.tasks.size()));
  CHECK(compiled >= 29);
  CHECK(backend->compiler().compiler_runs() == compiled);
}

TEST_CASE("env cuda: a broken kernel is a compile error with NVRTC's message and line") {
  leap::test::TempDir dir;
  NvrtcOptions o;
  o.cache_dir = dir.path.string();
  NvrtcCompiler nvrtc(o);
  const std::string code =
      "extern \"C\" __global__ void k(float* y, long long n) {\n"
      "  long long i = threadIdx.x;\n"
      "  if (i < n) y[i] = undefined_thing;\n"
      "}\n";
  NvrtcResult r = nvrtc.compile(code);
  CHECK_FALSE(r.ok);
  CHECK_FALSE(r.timed_out);
  CAPTURE(r.feedback);
  CHECK(contains(r.feedback, "solution.cu(3): error: identifier \"undefined_thing\" is undefined"));
  CHECK(contains(r.log, "1 error detected"));
  CHECK_FALSE(contains(r.feedback, "detected in the compilation"));
  // A failure is cached too.
  NvrtcResult again = nvrtc.compile(code);
  CHECK(again.from_cache);
  CHECK(again.feedback == r.feedback);
  CHECK(nvrtc.compiler_runs() == 1);

  SUBCASE("only the first errors are kept") {
    std::string many = "extern \"C\" __global__ void k(float* y) {\n";
    for (int i = 0; i < 9; ++i) many += "  y[" + std::to_string(i) + "] = bad" + std::to_string(i) + ";\n";
    many += "}\n";
    NvrtcResult m = nvrtc.compile(many);
    CHECK_FALSE(m.ok);
    CHECK(contains(m.feedback, "solution.cu(2): error"));
    CHECK(contains(m.feedback, "solution.cu(6): error"));        // the 5th error
    CHECK_FALSE(contains(m.feedback, "solution.cu(7): error"));  // the 6th is dropped
  }
  SUBCASE("host code and host headers are not available") {
    NvrtcResult h = nvrtc.compile("#include <vector>\nextern \"C\" __global__ void k() {}\n");
    CHECK_FALSE(h.ok);
    CHECK(contains(h.feedback, "solution.cu(1)"));
    CHECK(contains(h.feedback, "vector"));
  }
  SUBCASE("the shipped fp16 and bf16 headers are available") {
    NvrtcResult f = nvrtc.compile(
        "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
        "extern \"C\" __global__ void h(__half* x, __nv_bfloat16* y) {\n"
        "  x[threadIdx.x] = __float2half(1.5f); y[threadIdx.x] = __float2bfloat16(2.5f); }\n");
    CHECK_MESSAGE(f.ok, f.feedback);
    CHECK(f.exports == std::set<std::string>{"h"});
  }
}

TEST_CASE("env cuda: Hopper and later targets are arch-specific, so wgmma compiles for sm_90a") {
  CHECK(nvrtc_arch_for(9, 0) == "sm_90a");
  CHECK(nvrtc_arch_for(10, 0) == "sm_100a");
  CHECK(nvrtc_arch_for(12, 0) == "sm_120a");
  CHECK(nvrtc_arch_for(8, 0) == "sm_80");
  CHECK(nvrtc_arch_for(8, 9) == "sm_89");
  // A kernel using Hopper's warpgroup MMA fence and register reallocation: CUBIN for sm_90a,
  // while plain sm_90 (what an H100/H200 got before) refuses the instructions.
  const std::string code =
      "extern \"C\" __global__ void k(float* y) {\n"
      "  asm volatile(\"wgmma.fence.sync.aligned;\\n\" ::: \"memory\");\n"
      "  asm volatile(\"setmaxnreg.inc.sync.aligned.u32 232;\\n\");\n"
      "  y[threadIdx.x] = 1.0f;\n"
      "}\n";
  leap::test::TempDir dir;
  NvrtcOptions a;
  a.cache_dir = dir.path.string();
  a.arch = "sm_90a";
  NvrtcResult ok = NvrtcCompiler(a).compile(code);
  CHECK_MESSAGE(ok.ok, ok.feedback);
  CHECK(ok.exports == std::set<std::string>{"k"});
  NvrtcOptions plain = a;
  plain.arch = "sm_90";
  NvrtcResult refused = NvrtcCompiler(plain).compile(code);
  CHECK_FALSE(refused.ok);
  CAPTURE(refused.log);
  CHECK((contains(refused.log, "wgmma") || contains(refused.log, "setmaxnreg") || contains(refused.log, "sm_90a")));
}

TEST_CASE("env cuda: the compile cache returns the same CUBIN without running NVRTC") {
  leap::test::TempDir dir;
  NvrtcOptions o;
  o.cache_dir = dir.path.string();
  NvrtcCompiler a(o);
  NvrtcResult first = a.compile(kVaddCode);
  REQUIRE_MESSAGE(first.ok, first.feedback);
  CHECK_FALSE(first.from_cache);
  CHECK(first.seconds > 0);
  CHECK(first.exports == std::set<std::string>{"vadd"});
  const std::string bytes = leap::test::read_file(first.cubin_path);
  NvrtcResult second = a.compile(kVaddCode);
  CHECK(second.from_cache);
  CHECK(second.seconds == 0);
  CHECK(second.key == first.key);
  CHECK(second.cubin_path == first.cubin_path);
  CHECK(second.exports == first.exports);
  CHECK(a.compiler_runs() == 1);
  // A fresh compiler on the same folder (another process, a later run) hits the cache too.
  NvrtcCompiler b(o);
  NvrtcResult third = b.compile(kVaddCode);
  CHECK(third.from_cache);
  CHECK(b.compiler_runs() == 0);
  CHECK(leap::test::read_file(third.cubin_path) == bytes);
  // Another architecture or another source is another entry.
  NvrtcOptions o80 = o;
  o80.arch = "sm_80";
  NvrtcCompiler c(o80);
  NvrtcResult other_arch = c.compile(kVaddCode);
  CHECK_FALSE(other_arch.from_cache);
  CHECK(other_arch.key != first.key);
  NvrtcResult other_src = a.compile(std::string(kVaddCode) + "// changed\n");
  CHECK_FALSE(other_src.from_cache);
  CHECK(a.compiler_runs() == 2);
  // PTX targets are refused: CUBIN only.
  NvrtcOptions ptx = o;
  ptx.arch = "compute_90";
  CHECK_THROWS_AS(NvrtcCompiler{ptx}, leap::Error);
}

TEST_CASE("env cuda: CUBIN symbol parsing") {
  CHECK_FALSE(is_elf("not an elf"));
  CHECK_THROWS_AS(cubin_kernel_names("\x7f" "ELF but far too short"), leap::Error);
  leap::test::TempDir dir;
  NvrtcOptions o;
  o.cache_dir = dir.path.string();
  NvrtcCompiler nvrtc(o);
  // Two kernels and a device helper: only the kernels are entry points.
  NvrtcResult r = nvrtc.compile(
      "__device__ __noinline__ float twice(float v) { return 2 * v; }\n"
      "extern \"C\" __global__ void first(float* y) { y[threadIdx.x] = twice(y[threadIdx.x]); }\n"
      "extern \"C\" __global__ void second(float* y) { y[threadIdx.x] = 0; }\n");
  REQUIRE_MESSAGE(r.ok, r.feedback);
  CHECK(r.exports == std::set<std::string>{"first", "second"});
}

TEST_CASE("env cuda: launch-plan checks that need no GPU are launch errors") {
  leap::test::TempDir dir;
  auto backend = compile_only_backend(dir.path.string());
  leap::config::EnvConfig e = gpu_env(dir.path.string());
  // The verifier stops before running anything for these, so a pool without a GPU will do.
  PoolOptions po;
  po.workers = 1;
  auto pool = std::make_shared<WorkerPool>(backend, po);
  Verifier verifier(backend, pool, leap::cli::verifier_options(e));
  RuntimeTask relu(leap::tasks::load_task(kStarter + "/relu"), "cuda");
  const std::string code =
      "extern \"C\" __global__ void relu_k(const float* x, float* y, long long n) {\n"
      "  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
      "  if (i < n) y[i] = fmaxf(x[i], 0.0f);\n"
      "}\n";
  auto plan = [](const std::string& kernel, const std::string& grid, const std::string& block,
                 const std::string& shared = "0") {
    return "launches:\n  - kernel: " + kernel + "\n    grid: " + grid + "\n    block: " + block +
           "\n    shared_bytes: " + shared + "\n    args: [x, y, numel(x)]\n";
  };
  SUBCASE("unknown kernel") {
    auto r = verifier.evaluate(relu, cuda_answer(code, plan("relu_kernel", "[ceil_div(numel(x), 256)]", "[256]")));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::launch_error);
    CHECK(contains(r.feedback, "relu_kernel"));
  }
  SUBCASE("block over 1024 threads") {
    auto r = verifier.evaluate(relu, cuda_answer(code, plan("relu_k", "[ceil_div(numel(x), 2048)]", "[2048]")));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::launch_error);
    CHECK(contains(r.feedback, "2048"));
  }
  SUBCASE("block 32 x 64 = 2048 threads in two dims") {
    auto r = verifier.evaluate(relu, cuda_answer(code, plan("relu_k", "[1]", "[32, 64]")));
    CHECK(r.verdict == Verdict::launch_error);
  }
  SUBCASE("grid y over 65535") {
    auto r = verifier.evaluate(relu, cuda_answer(code, plan("relu_k", "[1, 70000]", "[256]")));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::launch_error);
    CHECK(contains(r.feedback, "70000"));
  }
  SUBCASE("shared memory over the per-block maximum") {
    auto r = verifier.evaluate(relu, cuda_answer(code, plan("relu_k", "[1]", "[256]", "300000")));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::launch_error);
    CHECK(contains(r.feedback, "300000"));
  }
  SUBCASE("a compile error reaches the verdict with its line") {
    auto r = verifier.evaluate(relu, cuda_answer("extern \"C\" __global__ void relu_k(const float* x, float* y, long long n) {\n"
                                                 "  y[0] = x[0] +;\n}\n",
                                                 plan("relu_k", "[1]", "[1]")));
    CAPTURE(r.feedback);
    CHECK(r.verdict == Verdict::compile_error);
    CHECK(contains(r.feedback, "solution.cu(2): error"));
    CHECK(contains(r.feedback, "line numbers count from the first line of the cuda block"));
  }
  SUBCASE("a cpp block is a format error for the cuda backend") {
    auto r = verifier.evaluate(relu, "```cpp\nextern \"C\" void relu_k() {}\n```\n```yaml\n" + plan("relu_k", "[1]", "[1]") + "```\n");
    CHECK(r.verdict == Verdict::format_error);
  }
  CHECK(backend->limits().max_threads_per_block == (gpu() ? gpu()->max_threads_per_block : 1024));
}

TEST_CASE("env cuda: without a GPU the backend says so") {
  if (gpu()) {
    std::printf("LEAP-SKIP: this machine has a GPU (%s)\n", gpu()->summary().c_str());
    return;
  }
  leap::test::TempDir dir;
  CudaBackendOptions o;
  o.nvrtc.cache_dir = dir.path.string();
  try {
    CudaBackend b(o);
    FAIL("a CudaBackend that requires a device was built without one");
  } catch (const CudaUnavailableError& e) {
    CHECK(contains(e.what(), "needs an NVIDIA GPU"));
  }
  CHECK_THROWS_AS(leap::cli::make_environment(gpu_env(dir.path.string()), "cuda"), CudaUnavailableError);
  // A compile-only backend's worker reports a runtime error instead of crashing.
  auto backend = compile_only_backend(dir.path.string());
  // Without a device the verifier times the reference on the CPU; a reference job sent to a
  // worker anyway is a runtime error naming the device, not a crash.
  CHECK(backend->reference_device().empty());
  {
    TaskInterface t = vadd_task(16);
    LaunchPlan plan = parse_launch_plan(kVaddPlan, t, backend->plan_options());
    BoundPlan bound = bind_plan(plan, t, backend->limits());
    SharedBuffers buf(bound.tensors);
    WorkerPool pool(backend, one_worker_pool(1));
    RunRequest req;
    req.reference = ReferenceProgram{kVaddReference, "", "vadd.yaml", 2};
    RunOutcome r = pool.run(Artifact{}, bound, buf, req);
    CAPTURE(r.message);
    CHECK(r.verdict == Verdict::runtime_error);
    CHECK(contains(r.message, "the reference on cuda:0 failed"));
  }
  TaskInterface t = vadd_task(16);
  LaunchPlan plan = parse_launch_plan(kVaddPlan, t, backend->plan_options());
  CompileOutcome c = backend->compile(kVaddCode, plan);
  REQUIRE(c.ok);
  BoundPlan bound = bind_plan(plan, t, backend->limits(), &c.artifact.exports);
  SharedBuffers buf(bound.tensors);
  WorkerPool pool(backend, one_worker_pool(1));
  RunOutcome r = pool.run(c.artifact, bound, buf);
  CHECK(r.verdict == Verdict::runtime_error);
  CHECK(contains(r.message, "cannot run cuda code here"));
}

// ---- tests that need a GPU ------------------------------------------------------------------

namespace {

// One vadd run through a pool of the GPU backend; returns the outcome, outputs in `buf`.
struct GpuFixture {
  leap::test::TempDir dir;
  std::shared_ptr<CudaBackend> backend;
  std::unique_ptr<WorkerPool> pool;
  GpuFixture() {
    CudaBackendOptions o;
    o.nvrtc.cache_dir = dir.path.string();
    backend = std::make_shared<CudaBackend>(o);
    pool = std::make_unique<WorkerPool>(backend, one_worker_pool(4));
  }
  RunOutcome run(const TaskInterface& t, const std::string& code, const std::string& plan_yaml,
                 std::unique_ptr<SharedBuffers>& buf, BoundPlan& bound, const RunRequest& req = {}) {
    LaunchPlan plan = parse_launch_plan(plan_yaml, t, backend->plan_options());
    CompileOutcome c = backend->compile(code, plan);
    REQUIRE_MESSAGE(c.ok, c.feedback);
    bound = bind_plan(plan, t, backend->limits(), &c.artifact.exports);
    if (!buf) buf = std::make_unique<SharedBuffers>(bound.tensors);
    return pool->run(c.artifact, bound, *buf, req);
  }
};

void fill_vadd(SharedBuffers& buf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    buf.as<float>(0)[i] = static_cast<float>(i);
    buf.as<float>(1)[i] = static_cast<float>(1 - 0.5 * static_cast<double>(i));
    buf.as<float>(2)[i] = std::nanf("");
  }
}

}  // namespace

TEST_CASE("env cuda gpu: a kernel runs on the GPU and its outputs come back, with event timings") {
  if (skip_without_gpu()) return;
  GpuFixture f;
  const int64_t n = 100000;
  TaskInterface t = vadd_task(n);
  std::unique_ptr<SharedBuffers> buf;
  BoundPlan bound;
  LaunchPlan plan = parse_launch_plan(kVaddPlan, t, f.backend->plan_options());
  bound = bind_plan(plan, t, f.backend->limits());
  buf = std::make_unique<SharedBuffers>(bound.tensors);
  fill_vadd(*buf, n);
  RunOutcome r = f.run(t, kVaddCode, kVaddPlan, buf, bound, timed_request(2, 5));
  CAPTURE(r.message);
  REQUIRE(r.ok());
  CHECK(r.times_ms.size() == 5);
  for (double ms : r.times_ms) CHECK((ms > 0 && ms < 100));
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    float want = 2.0f * (static_cast<float>(i) + static_cast<float>(1 - 0.5 * static_cast<double>(i))) + 0.25f;
    bad += buf->as<float>(2)[i] != want;
  }
  CHECK(bad == 0);
  CHECK(buf->as<float>(0)[7] == 7.0f);  // inputs unchanged
}

TEST_CASE("env cuda gpu: faults are runtime errors with the CUDA error name, and the worker is replaced") {
  if (skip_without_gpu()) return;
  GpuFixture f;
  TaskInterface t = vadd_task(1024);
  std::unique_ptr<SharedBuffers> buf;
  BoundPlan bound;
  const std::string wild =
      "extern \"C\" __global__ void vadd(const float* a, const float* b, float* c, long long n, float s, double d) {\n"
      "  c[threadIdx.x + (1ll << 40)] = 1.0f;\n}\n";
  const int before = f.pool->replacements();
  RunOutcome r = f.run(t, wild, kVaddPlan, buf, bound);
  CAPTURE(r.message);
  CHECK(r.verdict == Verdict::runtime_error);
  CHECK(contains(r.message, "CUDA_ERROR_ILLEGAL_ADDRESS"));
  CHECK(r.failed_launch == 0);
  // The poisoned worker exits after replying; the next job runs in a fresh one.
  std::unique_ptr<SharedBuffers> buf2;
  BoundPlan bound2;
  LaunchPlan plan = parse_launch_plan(kVaddPlan, t, f.backend->plan_options());
  bound2 = bind_plan(plan, t, f.backend->limits());
  buf2 = std::make_unique<SharedBuffers>(bound2.tensors);
  fill_vadd(*buf2, 1024);
  RunOutcome ok = f.run(t, kVaddCode, kVaddPlan, buf2, bound2);
  CAPTURE(ok.message);
  CHECK(ok.ok());
  CHECK(f.pool->replacements() > before);
  CHECK(buf2->as<float>(2)[3] == 2.0f * (3.0f - 0.5f) + 0.25f);

  SUBCASE("a trap") {
    const std::string trap =
        "extern \"C\" __global__ void vadd(const float* a, const float* b, float* c, long long n, float s, double d) {\n"
        "  if (threadIdx.x == 5) __trap();\n}\n";
    std::unique_ptr<SharedBuffers> b3;
    BoundPlan p3;
    RunOutcome tr = f.run(t, trap, kVaddPlan, b3, p3);
    CAPTURE(tr.message);
    CHECK(tr.verdict == Verdict::runtime_error);
    CHECK(contains(tr.message, "CUDA_ERROR"));
  }
  SUBCASE("a kernel that never ends is a timeout") {
    const std::string spin =
        "extern \"C\" __global__ void vadd(const float* a, const float* b, float* c, long long n, float s, double d) {\n"
        "  volatile int k = 1; while (k) {}\n}\n";
    std::unique_ptr<SharedBuffers> b4;
    BoundPlan p4;
    RunOutcome to = f.run(t, spin, kVaddPlan, b4, p4);
    CAPTURE(to.message);
    CHECK(to.verdict == Verdict::timeout);
  }
}

TEST_CASE("env cuda gpu: a parent that uses CUDA itself gets working workers, replacements after a fault too") {
  if (skip_without_gpu()) return;
  // The trainer's situation with model.device: cuda: CUDA is initialised in this process before
  // any worker starts. Workers are zygote children (exec-started), so they can still use the GPU.
  torch::Tensor on_gpu = torch::ones({16}, torch::TensorOptions().device(torch::kCUDA));
  REQUIRE(on_gpu.sum().item<float>() == 16.0f);
  GpuFixture f;
  TaskInterface t = vadd_task(1024);
  auto good_run = [&] {
    std::unique_ptr<SharedBuffers> b;
    BoundPlan p;
    LaunchPlan plan = parse_launch_plan(kVaddPlan, t, f.backend->plan_options());
    p = bind_plan(plan, t, f.backend->limits());
    b = std::make_unique<SharedBuffers>(p.tensors);
    fill_vadd(*b, 1024);
    RunOutcome r = f.run(t, kVaddCode, kVaddPlan, b, p);
    CAPTURE(r.message);
    CHECK(r.ok());
    CHECK(b->as<float>(2)[3] == 2.0f * (3.0f - 0.5f) + 0.25f);
  };
  good_run();
  const std::string wild =
      "extern \"C\" __global__ void vadd(const float* a, const float* b, float* c, long long n, float s, double d) {\n"
      "  c[threadIdx.x + (1ll << 40)] = 1.0f;\n}\n";
  std::unique_ptr<SharedBuffers> buf;
  BoundPlan bound;
  const int before = f.pool->replacements();
  RunOutcome bad = f.run(t, wild, kVaddPlan, buf, bound);
  CAPTURE(bad.message);
  CHECK(bad.verdict == Verdict::runtime_error);
  good_run();  // in a replacement started after this process's CUDA context existed
  CHECK(f.pool->replacements() > before);
}

TEST_CASE("env cuda gpu: launch errors found on the device") {
  if (skip_without_gpu()) return;
  GpuFixture f;
  TaskInterface t = vadd_task(1024);
  SUBCASE("parameter count mismatch") {
    std::unique_ptr<SharedBuffers> b;
    BoundPlan p;
    RunOutcome r = f.run(t, "extern \"C\" __global__ void vadd(float* a, float* b, float* c) {}\n", kVaddPlan, b, p);
    CAPTURE(r.message);
    CHECK(r.verdict == Verdict::launch_error);
    CHECK(contains(r.message, "takes 3 parameters"));
  }
  SUBCASE("more than 48 KiB of dynamic shared memory is allowed and works") {
    const std::string code =
        "extern \"C\" __global__ void vadd(const float* a, const float* b, float* c, long long n, float s, double d) {\n"
        "  extern __shared__ float tile[];\n"
        "  for (int i = threadIdx.x; i < 20000; i += blockDim.x) tile[i] = a[i % n];\n"
        "  __syncthreads();\n"
        "  for (int i = threadIdx.x; i < n; i += blockDim.x) c[i] = tile[i] + tile[19999];\n}\n";
    const std::string plan = "launches:\n  - kernel: vadd\n    grid: [1]\n    block: [256]\n    shared_bytes: 80000\n"
                             "    args: [a, b, c, N, scale, shift]\n";
    std::unique_ptr<SharedBuffers> b;
    BoundPlan p;
    LaunchPlan lp = parse_launch_plan(plan, t, f.backend->plan_options());
    p = bind_plan(lp, t, f.backend->limits());
    b = std::make_unique<SharedBuffers>(p.tensors);
    fill_vadd(*b, 1024);
    RunOutcome r = f.run(t, code, plan, b, p);
    CAPTURE(r.message);
    REQUIRE(r.ok());
    CHECK(b->as<float>(2)[10] == 10.0f + static_cast<float>(19999 % 1024));
  }
}

TEST_CASE("env cuda gpu: the starter softmax solution is correct through the verifier, with GPU timings") {
  if (skip_without_gpu()) return;
  leap::test::TempDir dir;
  auto env = leap::cli::make_environment(gpu_env(dir.path.string()), "cuda");
  RuntimeTask task(leap::tasks::load_task(kStarter + "/softmax_rows"), "cuda");
  auto r = env->verifier->evaluate(task, leap::test::read_file(kStarter + "/softmax_rows/solutions/cuda_block_per_row.md"));
  CAPTURE(r.feedback);
  CHECK(r.verdict == Verdict::correct);
  CHECK(r.candidate_ms > 0);
  CHECK(r.details.at("reference_device") == "cuda:0");
}

TEST_CASE("env cuda gpu: profile feedback times each launch of a two-launch answer in the warm-up runs") {
  if (skip_without_gpu()) return;
  leap::test::TempDir dir;
  leap::config::EnvConfig e = gpu_env(dir.path.string());
  e.profile_feedback = true;
  e.timing.warmup = 3;  // runs 1 and 2 are profiled (run 0 synchronises after every launch)
  auto env = leap::cli::make_environment(e, "cuda");
  RuntimeTask task(leap::tasks::load_task(kStarter + "/linear_softmax"), "cuda");
  auto r = env->verifier->evaluate(task, leap::test::read_file(kStarter + "/linear_softmax/solutions/cuda_gemm_then_softmax.md"));
  CAPTURE(r.feedback);
  REQUIRE(r.verdict == Verdict::correct);
  CHECK(r.feedback.find("\nprofile: 2 launches per call, ") != std::string::npos);
  const size_t at = r.feedback.find("\nper launch (warm-up runs): linear_logits ");
  REQUIRE(at != std::string::npos);
  CHECK(r.feedback.find(" ms (", at) != std::string::npos);
  CHECK(r.feedback.find(", softmax_rows ", at) != std::string::npos);

  // Straight from the backend: one median per launch, positive; none without the switch.
  GpuFixture f;
  const int64_t n = 100000;
  TaskInterface t = vadd_task(n);
  const std::string two = std::string(kVaddPlan) + "  - kernel: vadd\n    grid: [ceil_div(N, 256)]\n    block: [256]\n"
                          "    args: [a, b, c, N, scale, shift]\n";
  std::unique_ptr<SharedBuffers> buf;
  BoundPlan bound;
  LaunchPlan plan = parse_launch_plan(two, t, f.backend->plan_options());
  bound = bind_plan(plan, t, f.backend->limits());
  buf = std::make_unique<SharedBuffers>(bound.tensors);
  fill_vadd(*buf, n);
  RunRequest req = timed_request(3, 5);
  RunOutcome plain = f.run(t, kVaddCode, two, buf, bound, req);
  REQUIRE(plain.ok());
  CHECK(plain.launch_ms.empty());
  req.profile_launches = true;
  RunOutcome prof = f.run(t, kVaddCode, two, buf, bound, req);
  CAPTURE(prof.message);
  REQUIRE(prof.ok());
  REQUIRE(prof.launch_ms.size() == 2);
  for (double ms : prof.launch_ms) CHECK((ms > 0 && ms < 100));
  CHECK(prof.times_ms.size() == 5);
}

TEST_CASE("env cuda gpu: a reference job runs the TorchScript on the GPU, timed with CUDA events") {
  if (skip_without_gpu()) return;
  GpuFixture f;
  CHECK(f.backend->reference_device() == "cuda:0");
  const int64_t n = 1 << 20;
  TaskInterface t = vadd_task(n);
  LaunchPlan plan = parse_launch_plan(kVaddPlan, t, f.backend->plan_options());
  BoundPlan bound = bind_plan(plan, t, f.backend->limits());
  SharedBuffers buf(bound.tensors);
  fill_vadd(buf, n);
  RunRequest req = timed_request(2, 5);
  req.reference = ReferenceProgram{kVaddReference, "", "vadd.yaml", 2};
  RunOutcome r = f.pool->run(Artifact{}, bound, buf, req);
  CAPTURE(r.message);
  REQUIRE(r.ok());
  REQUIRE(r.times_ms.size() == 5);
  for (double ms : r.times_ms) CHECK((std::isfinite(ms) && ms > 0 && ms < 100));
  CHECK(std::isnan(buf.as<float>(2)[0]));  // a reference job writes nothing back

  // A reference that fails on the device is a runtime error naming the device and the reason.
  req.reference->torchscript = "def reference(a: Tensor, b: Tensor) -> Tensor:\n    return torch.mm(a, b)\n";
  RunOutcome bad = f.pool->run(Artifact{}, bound, buf, req);
  CAPTURE(bad.message);
  CHECK(bad.verdict == Verdict::runtime_error);
  CHECK(contains(bad.message, "the reference on cuda:0 failed"));
  // ... and the worker still times the good one afterwards.
  req.reference->torchscript = kVaddReference;
  CHECK(f.pool->run(Artifact{}, bound, buf, req).ok());
}

TEST_CASE("env cuda gpu: the reference of a starter cuda solution is timed on the GPU") {
  if (skip_without_gpu()) return;
  leap::test::TempDir dir;
  auto env = leap::cli::make_environment(gpu_env(dir.path.string()), "cuda");
  // softmax (elementwise and reductions) and a square matmul (cuBLAS, with TF32 off).
  for (const auto& [name, file] : {std::pair<std::string, std::string>{"softmax_rows", "cuda_block_per_row.md"},
                                   {"matmul_square", "cuda_tiled.md"}}) {
    CAPTURE(name);
    RuntimeTask task(leap::tasks::load_task(kStarter + "/" + name), "cuda");
    auto r = env->verifier->evaluate(task, leap::test::read_file(kStarter + "/" + name + "/solutions/" + file));
    CAPTURE(r.feedback);
    REQUIRE(r.verdict == Verdict::correct);  // (a reference that cannot be timed there is infra_error)
    CHECK(r.details.at("reference_device") == "cuda:0");
    CHECK(std::isfinite(r.reference_ms));
    CHECK(r.reference_ms > 0);
    CHECK(std::stoi(r.details.at("trials_reference")) >= 1);
    CHECK(std::isfinite(r.speedup));
  }
}

TEST_SUITE_END();

#endif  // LEAP_HAVE_NVRTC
