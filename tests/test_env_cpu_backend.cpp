// Tests of the cpu backend (real g++), the worker pool (real processes) and the subprocess helper.
#include <doctest/doctest.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include "env/binding.hpp"
#include "env/cpu_backend.hpp"
#include "env/errors.hpp"
#include "env/extract.hpp"
#include "env/launch_plan.hpp"
#include "env/shared_buffers.hpp"
#include "env/worker_pool.hpp"
#include "util/subprocess.hpp"

using namespace leap::env;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("env");

namespace {

leap::util::ProcessOptions opts(double timeout_s) {
  leap::util::ProcessOptions o;
  o.timeout_s = timeout_s;
  return o;
}

PoolOptions pool_opts(int workers, double timeout_s, int max_jobs = 1) {
  PoolOptions o;
  o.workers = workers;
  o.run_timeout_s = timeout_s;
  o.max_jobs_per_worker = max_jobs;
  return o;
}

// A fresh cache directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "leap-env-test-XXXXXX").string();
    REQUIRE(mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {  // not fs::remove_all: libtorch.so's exported copy of it crashes
    std::string cmd = "rm -rf '" + path.string() + "'";
    CHECK(std::system(cmd.c_str()) == 0);
  }
};

TaskInterface vadd_task(int64_t n) {
  TaskInterface t;
  t.inputs = {{"a", DType::float32, {"N"}}, {"b", DType::float32, {"N"}}};
  t.outputs = {{"c", DType::float32, {"N"}}};
  t.sizes = {{"N", n}};
  t.constants = {{"scale", 2.0, ScalarType::float32}, {"shift", 0.25, ScalarType::float64}};
  return t;
}

const char* kVaddPlan = "launches:\n  - kernel: vadd\n    args: [a, b, c, N, scale, shift]\n";

const char* kVaddCode = R"(#include <cstdint>
extern "C" void vadd(const float* a, const float* b, float* c, int64_t n, float scale, double shift) {
  for (int64_t i = 0; i < n; ++i) c[i] = scale * (a[i] + b[i]) + static_cast<float>(shift);
}
)";

std::shared_ptr<CpuBackend> make_backend(const TempDir& dir) {
  CpuBackendOptions o;
  o.cache_dir = dir.path.string();
  o.flags = {"-O1", "-fPIC", "-shared", "-Wl,--no-undefined"};  // -O1: the 2-core test machine
  return std::make_shared<CpuBackend>(o);
}

// Everything one solution needs: parsed plan, compiled artifact, bound plan, shared buffers.
struct Prepared {
  LaunchPlan plan;
  CompileOutcome compiled;
  BoundPlan bound;
  std::unique_ptr<SharedBuffers> buffers;
};

Prepared prepare(CpuBackend& backend, const TaskInterface& task, const std::string& code, const std::string& plan_yaml) {
  Prepared p;
  p.plan = parse_launch_plan(plan_yaml, task, backend.plan_options());
  p.compiled = backend.compile(code, p.plan);
  REQUIRE_MESSAGE(p.compiled.ok, p.compiled.log);
  p.bound = bind_plan(p.plan, task, backend.limits());
  p.buffers = std::make_unique<SharedBuffers>(p.bound.tensors);
  return p;
}

void fill_inputs(SharedBuffers& buf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    buf.as<float>(0)[i] = static_cast<float>(i);
    buf.as<float>(1)[i] = static_cast<float>(-0.5 * static_cast<double>(i) + 1);
    buf.as<float>(2)[i] = std::nanf("");
  }
}

void check_vadd_outputs(const SharedBuffers& buf, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float want = 2.0f * (static_cast<float>(i) + static_cast<float>(-0.5 * static_cast<double>(i) + 1)) + 0.25f;
    if (buf.as<float>(2)[i] != want) {
      FAIL("c[" << i << "] = " << buf.as<float>(2)[i] << ", expected " << want);
      return;
    }
  }
}

}  // namespace

TEST_CASE("env: subprocess captures output, exit status and timeouts") {
  auto r = leap::util::run_process({"sh", "-c", "echo out; echo err >&2; exit 3"});
  CHECK(r.exit_code == 3);
  CHECK(r.output.find("out") != std::string::npos);
  CHECK(r.output.find("err") != std::string::npos);
  CHECK_FALSE(r.ok());
  auto start = std::chrono::steady_clock::now();
  r = leap::util::run_process({"sh", "-c", "sleep 30 & sleep 30"}, opts(0.5));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(r.timed_out);
  CHECK(r.term_signal == SIGKILL);
  CHECK(secs < 5);
  r = leap::util::run_process({"leap-no-such-program-xyz"});
  CHECK(r.exec_failed);
  leap::util::ProcessOptions in_root;
  in_root.cwd = "/";
  r = leap::util::run_process({"pwd"}, in_root);
  CHECK(r.output == "/\n");
}

TEST_CASE("env: shared buffer layout puts guard pages after every tensor") {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto l = BufferLayout::make({4000, 0, page + 8});
  REQUIRE(l.offsets.size() == 3);
  REQUIRE(l.guards.size() == 4);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(l.offsets[i] % 64 == 0);
    size_t end = l.offsets[i] + l.bytes[i];
    CHECK(end <= l.guards[i + 1].first);
    CHECK(l.guards[i + 1].first - end < 64);  // a write just past the end hits the guard page
    CHECK(l.offsets[i] >= l.guards[i].first + l.guards[i].second);
  }
  CHECK(l.total_bytes == l.guards.back().first + page);
}

TEST_CASE("env: cpu backend compiles, caches, and reports compile errors with line numbers") {
  TempDir dir;
  auto backend = make_backend(dir);
  auto task = vadd_task(16);
  auto plan = parse_launch_plan(kVaddPlan, task, backend->plan_options());

  auto first = backend->compile(kVaddCode, plan);
  REQUIRE_MESSAGE(first.ok, first.log);
  CHECK_FALSE(first.artifact.from_cache);
  CHECK(backend->compiler_runs() == 1);
  CHECK(fs::exists(first.artifact.path));
  CHECK(first.artifact.exports.count("vadd") == 1);
  CHECK(first.artifact.exports.count("__leap_call_pppiifd") == 0);  // trampolines are hidden from the list
  auto inode_of = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? st.st_ino : ino_t(0);
  };
  const ino_t inode = inode_of(first.artifact.path);  // written once (a rewrite renames a new file in)

  auto again = backend->compile(kVaddCode, plan);
  REQUIRE(again.ok);
  CHECK(again.artifact.from_cache);
  CHECK(again.artifact.path == first.artifact.path);
  CHECK(again.artifact.exports == first.artifact.exports);
  CHECK(backend->compiler_runs() == 1);  // no second compiler run
  CHECK(inode_of(again.artifact.path) == inode);

  // A second backend on the same cache directory also hits.
  auto other = make_backend(dir);
  CHECK(other->compile(kVaddCode, plan).artifact.from_cache);
  CHECK(other->compiler_runs() == 0);

  // A different source misses.
  std::string changed = std::string(kVaddCode) + "// v2\n";
  CHECK_FALSE(backend->compile(changed, plan).artifact.from_cache);
  CHECK(backend->compiler_runs() == 2);

  // A compile error: the feedback names solution.cpp and the line of the error.
  const std::string bad =
      "#include <cstdint>\n"
      "extern \"C\" void vadd(const float* a, const float* b, float* c, int64_t n, float s, double t) {\n"
      "  for (int64_t i = 0; i < n; ++i) c[i] = a[i] + undefined_thing;\n"
      "}\n";
  auto err = backend->compile(bad, plan);
  CHECK_FALSE(err.ok);
  CHECK(err.feedback.find("solution.cpp:3:") != std::string::npos);
  CHECK(err.feedback.find("undefined_thing") != std::string::npos);
  CHECK(err.feedback.size() <= 2000);
  int runs = backend->compiler_runs();
  auto err2 = backend->compile(bad, plan);  // failures are cached too
  CHECK_FALSE(err2.ok);
  CHECK(err2.feedback == err.feedback);
  CHECK(backend->compiler_runs() == runs);

  // A call to an undefined function fails at link time, not at load time.
  auto undefined = backend->compile(
      "extern \"C\" void helper();\nextern \"C\" void vadd() { helper(); }\n", plan);
  CHECK_FALSE(undefined.ok);
  CHECK(undefined.feedback.find("helper") != std::string::npos);
  CHECK(undefined.feedback.find("OpenMP") == std::string::npos);
  // OpenMP's runtime is not linked: the feedback says so rather than a bare linker error.
  auto omp = backend->compile("#include <omp.h>\nextern \"C\" void vadd() { (void)omp_get_max_threads(); }\n", plan);
  CHECK_FALSE(omp.ok);
  CHECK_MESSAGE(omp.feedback.find("OpenMP is not available here") != std::string::npos, omp.feedback);
  CHECK(omp.feedback.find("omp_get_max_threads") != std::string::npos);
}

TEST_CASE("env: the compile cache keeps at most its bound of modules, the least recently used out first") {
  TempDir dir;
  CompileCache cache(dir.path.string(), ".so", 1000);
  const std::string module(300, 'm');
  const auto base = fs::file_time_type::clock::now() - std::chrono::seconds(100);
  std::vector<std::string> keys;
  for (int i = 0; i < 6; ++i) {
    keys.push_back(CompileCache::key_of("answer " + std::to_string(i)));
    cache.store_compiled(keys.back(), module, {"k"});
    // Written a second apart in file time, so the order is the stores' whatever the clock's resolution.
    fs::last_write_time(dir.path / (keys.back() + ".so"), base + std::chrono::seconds(i));
    if (i == 2) CHECK(cache.find(keys[0]).state == CompileCache::Entry::State::compiled);  // a hit: used now
    uintmax_t total = 0;
    for (const auto& e : fs::directory_iterator(dir.path))
      if (e.path().extension() == ".so") total += e.file_size();
    CAPTURE(i);
    CHECK(total <= 1000);
    CHECK(fs::exists(dir.path / (keys.back() + ".so")));  // the newest stays
  }
  // 300-byte modules under a 1000-byte bound: the 4th store evicts down to 750 bytes (two modules
  // left: the one used at the 3rd and the 4th), and so does the 6th.
  CHECK(cache.find(keys[0]).state == CompileCache::Entry::State::compiled);
  CHECK(cache.find(keys[5]).state == CompileCache::Entry::State::compiled);
  for (int i = 1; i < 5; ++i) CHECK(cache.find(keys[static_cast<size_t>(i)]).state == CompileCache::Entry::State::missing);
  CHECK_FALSE(fs::exists(dir.path / (keys[1] + ".exports")));
}

TEST_CASE("env: a module larger than a worker loads is a compile_error, cached as the answer's own") {
  TempDir dir;
  auto backend = make_backend(dir);
  auto task = vadd_task(16);
  auto plan = parse_launch_plan(kVaddPlan, task, backend->plan_options());
  const std::string big = std::string("static volatile char big[80 << 20] = {1};\n") + kVaddCode +
                          "extern \"C\" char touch() { return big[12345]; }\n";
  auto r = backend->compile(big, plan);
  CHECK_FALSE(r.ok);
  CHECK(r.feedback.find("MB a worker loads") != std::string::npos);
  const int runs = backend->compiler_runs();
  auto again = backend->compile(big, plan);
  CHECK_FALSE(again.ok);
  CHECK(backend->compiler_runs() == runs);  // served from the cache: a failure of its own
  uintmax_t stored = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir.path))
    if (e.is_regular_file()) stored += e.file_size();
  CHECK(stored < (uintmax_t(1) << 20));  // no 80-MB module kept
}

TEST_CASE("env: cpu compile timeout is a compile_error that says so") {
  TempDir dir;
  CpuBackendOptions o;
  o.cache_dir = dir.path.string();
  o.compiler = "bash";  // a "compiler" that hangs: bash -c 'sleep 30' <sources...>
  o.flags = {"-c", "sleep 30"};
  o.compile_timeout_s = 0.5;
  CpuBackend backend(o);
  auto task = vadd_task(4);
  auto plan = parse_launch_plan(kVaddPlan, task, backend.plan_options());
  auto start = std::chrono::steady_clock::now();
  auto r = backend.compile(kVaddCode, plan);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < 10);
  CHECK_FALSE(r.ok);
  CHECK(r.timed_out);
  CHECK(r.feedback.find("timed out") != std::string::npos);
  // The same answer again: the same timeout, without running the compiler (it would hold a
  // grading thread for the whole limit at every grading); nothing of it in the compile cache.
  const int runs = backend.compiler_runs();
  auto again = backend.compile(kVaddCode, plan);
  CHECK(again.timed_out);
  CHECK(again.feedback == r.feedback);
  CHECK(backend.compiler_runs() == runs);
  for (const auto& e : fs::recursive_directory_iterator(dir.path))
    CHECK_MESSAGE(e.path().extension() != ".fail", e.path().string());
  // ... and a fresh backend (a later run) compiles it afresh.
  CpuBackend later(o);
  auto fresh = later.compile(kVaddCode, plan);
  CHECK(fresh.timed_out);
  CHECK(later.compiler_runs() == 1);
}

TEST_CASE("env: the compiler's version is asked once per process and compiler binary, not per backend") {
  // `--version` is a fork of the parent (a trainer's gigabytes of page tables): bench/env_cpu's
  // passes, each a new backend, spent ~100 ms apiece on it.
  TempDir dir;
  const fs::path cc = dir.path / "bin" / "versioncc";
  const fs::path log = dir.path / "version.log";
  fs::create_directories(cc.parent_path());
  auto write_compiler = [&](const std::string& version) {
    std::ofstream(cc) << "#!/bin/sh\nif [ \"$1\" = --version ]; then echo asked >> '" << log.string()
                      << "'; echo '" << version << "'; exit 0; fi\nexec g++ \"$@\"\n";
    fs::permissions(cc, fs::perms::owner_all);
  };
  auto asked = [&] {
    std::ifstream in(log);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line == "asked";
    return n;
  };
  write_compiler("versioncc 1.0");
  CpuBackendOptions o;
  o.cache_dir = (dir.path / "cache").string();
  o.compiler = cc.string();
  o.sandbox = SandboxMode::off;  // the script lives in a temporary folder
  auto task = vadd_task(4);
  std::string first_key;
  for (int k = 0; k < 3; ++k) {  // three backends, as three passes or three `leap eval` runs of one process
    CpuBackend backend(o);
    auto plan = parse_launch_plan(kVaddPlan, task, backend.plan_options());
    const CompileOutcome r = backend.compile(kVaddCode, plan);
    REQUIRE_MESSAGE(r.ok, r.log);
    if (k == 0) first_key = r.artifact.key;
    CHECK(r.artifact.key == first_key);
  }
  CHECK(asked() == 1);
  // Another compiler under the same name (an upgrade): asked again, and its modules are its own.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  write_compiler("versioncc 2.0");
  CpuBackend upgraded(o);
  auto plan = parse_launch_plan(kVaddPlan, task, upgraded.plan_options());
  const CompileOutcome r = upgraded.compile(kVaddCode, plan);
  REQUIRE_MESSAGE(r.ok, r.log);
  CHECK(asked() == 2);
  CHECK(r.artifact.key != first_key);
  CHECK_FALSE(r.artifact.from_cache);
}

TEST_CASE("env: a job's memory is recycled only after its worker has exited") {
  // env/shared_buffers.hpp: the pool notes each worker it sends memory to; that memory goes to
  // another job only once the worker is gone. (Whether a kept buffer with a live holder is handed
  // out is tested in test_env_shared_buffers.cpp; a cpu worker is killed after its job, and when
  // it has exited is a race, so here the pool's part: it names the worker, and the memory comes
  // back, zeroed, once that worker has exited.)
  TempDir dir;
  auto backend = make_backend(dir);
  const int64_t n = (int64_t(7) << 20) / 12;  // three float32 tensors of ~2.3 MiB: a 8-MiB class of its own
  auto task = vadd_task(n);
  auto p = prepare(*backend, task, kVaddCode, kVaddPlan);
  fill_inputs(*p.buffers, n);
  auto pool = std::make_unique<WorkerPool>(backend, pool_opts(1, 10, 0));
  const std::vector<pid_t> before = pool->pids();  // the one worker, which takes the job
  REQUIRE(before.size() == 1);
  RunRequest req;
  req.trials = 1;
  auto out = pool->run(p.compiled.artifact, p.bound, *p.buffers, req);
  REQUIRE_MESSAGE(out.ok(), out.message);
  check_vadd_outputs(*p.buffers, n);
  REQUIRE(p.buffers->holders().size() == 1);
  const pid_t worker = p.buffers->holders()[0];
  CHECK(worker == before[0]);
  p.buffers.reset();
  pool.reset();  // every worker stopped
  bool gone = false;
  for (int i = 0; i < 1000 && !gone; ++i) {
    gone = process_exited(worker);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(gone);
  SharedBuffers after(p.bound.tensors);
  CHECK(after.recycled());
  CHECK(after.holders().empty());
  for (size_t i = 0; i < after.size(); ++i) {
    const auto* b = static_cast<const unsigned char*>(after.data(i));
    CHECK(std::all_of(b, b + after.bytes(i), [](unsigned char c) { return c == 0; }));
  }
}

TEST_CASE("env: worker runs a vector-add kernel and the parent sees the outputs") {
  TempDir dir;
  auto backend = make_backend(dir);
  const int64_t n = 5000;  // not a multiple of the page size
  auto task = vadd_task(n);
  auto p = prepare(*backend, task, kVaddCode, kVaddPlan);
  fill_inputs(*p.buffers, n);
  WorkerPool pool(backend, pool_opts(2, 10));
  RunRequest req;
  req.warmup = 1;
  req.trials = 3;
  auto out = pool.run(p.compiled.artifact, p.bound, *p.buffers, req);
  REQUIRE_MESSAGE(out.ok(), out.message);
  CHECK(out.times_ms.size() == 3);
  CHECK(out.times_ms[0] >= 0);
  check_vadd_outputs(*p.buffers, n);
  CHECK(p.buffers->as<float>(0)[7] == 7.0f);  // inputs untouched

  // Through the answer-text path too, with scratch and two launches.
  const std::string answer =
      "Here it is.\n```cpp\n#include <cstdint>\n"
      "extern \"C\" void sum2(const float* a, const float* b, float* t, int64_t n) {"
      " for (int64_t i = 0; i < n; ++i) t[i] = a[i] + b[i]; }\n"
      "extern \"C\" void scale(const float* t, float* c, int64_t n, float s) {"
      " for (int64_t i = 0; i < n; ++i) c[i] = s * t[i] + 0.25f; }\n```\n"
      "```yaml\nscratch:\n  t: {dtype: float32, shape: [N]}\nlaunches:\n"
      "  - {kernel: sum2, args: [a, b, t, N]}\n  - {kernel: scale, args: [t, c, numel(c), scale]}\n```\n";
  auto ex = extract_answer(answer, backend->language());
  auto p2 = prepare(*backend, task, ex.code, ex.plan_yaml);
  REQUIRE(p2.bound.tensors.size() == 4);
  fill_inputs(*p2.buffers, n);
  auto out2 = pool.run(p2.compiled.artifact, p2.bound, *p2.buffers);
  REQUIRE_MESSAGE(out2.ok(), out2.message);
  check_vadd_outputs(*p2.buffers, n);
}

TEST_CASE("env: a crashing kernel is a runtime_error and the pool keeps working") {
  TempDir dir;
  auto backend = make_backend(dir);
  const int64_t n = 64;
  auto task = vadd_task(n);
  WorkerPool pool(backend, pool_opts(1, 10, 0));
  auto before = pool.pids();
  REQUIRE(before.size() == 1);

  auto crash = prepare(*backend, task,
                       "#include <cstdint>\nextern \"C\" void vadd(float* a, float* b, float* c, int64_t n, float s, double t) {\n"
                       "  *(volatile int*)(uintptr_t)n = 1; }\n",
                       kVaddPlan);
  auto out = pool.run(crash.compiled.artifact, crash.bound, *crash.buffers);
  CHECK(out.verdict == Verdict::runtime_error);
  CHECK(out.message.find("SIGSEGV") != std::string::npos);
  CHECK(out.message.find("launches[0] (vadd)") != std::string::npos);
  CHECK(out.failed_launch == 0);
  auto after = pool.pids();
  REQUIRE(after.size() == 1);
  CHECK(after[0] != before[0]);  // replaced

  // Writing past the end of an output hits the guard page.
  auto overrun = prepare(*backend, task,
                         "#include <cstdint>\nextern \"C\" void vadd(float* a, float* b, float* c, int64_t n, float s, double t) {\n"
                         "  for (int64_t i = 0; i < n + 4096; ++i) c[i] = 0; }\n",
                         kVaddPlan);
  auto out_over = pool.run(overrun.compiled.artifact, overrun.bound, *overrun.buffers);
  CHECK(out_over.verdict == Verdict::runtime_error);
  CHECK(out_over.message.find("SIGSEGV") != std::string::npos);

  // abort() is reported with its signal too.
  auto aborts = prepare(*backend, task,
                        "#include <cstdlib>\n#include <cstdint>\nextern \"C\" void vadd(float*, float*, float*, int64_t, float, double) { std::abort(); }\n",
                        kVaddPlan);
  auto out_abort = pool.run(aborts.compiled.artifact, aborts.bound, *aborts.buffers);
  CHECK(out_abort.verdict == Verdict::runtime_error);
  CHECK(out_abort.message.find("SIGABRT") != std::string::npos);

  auto good = prepare(*backend, task, kVaddCode, kVaddPlan);
  fill_inputs(*good.buffers, n);
  auto ok = pool.run(good.compiled.artifact, good.bound, *good.buffers);
  REQUIRE_MESSAGE(ok.ok(), ok.message);
  check_vadd_outputs(*good.buffers, n);
  // A worker that loaded code ends after that job even when max_jobs_per_worker is 0 (unlimited):
  // the code is never unloaded (no destructor of it runs after its last call) and nothing it
  // changed in the process reaches another job. The next job gets a fresh worker.
  auto pid_good = pool.pids();
  auto ok2 = pool.run(good.compiled.artifact, good.bound, *good.buffers);
  CHECK(ok2.ok());
  CHECK(pool.pids() != pid_good);
}

TEST_CASE("env: a cpu worker is retired after its job even when the answer's own reply says it stays") {
  // The answer computes, then writes a well-formed reply of its own to the job socket ahead of the
  // worker's, with "exiting": false. The parent reads that frame first; were the flag trusted, the
  // process holding the answer's code (and any thread it started) would get the next job, where
  // the worker's own late reply would also be waiting. With workers reused (max_jobs 100), the
  // next job still gets a fresh process.
  TempDir dir;
  auto backend = make_backend(dir);
  const int64_t n = 32;
  auto task = vadd_task(n);
  WorkerPool pool(backend, pool_opts(1, 10, 100));
  const std::string forging = R"(#include <cstdint>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
extern "C" void vadd(const float* a, const float* b, float* c, int64_t n, float scale, double shift) {
  for (int64_t i = 0; i < n; ++i) c[i] = scale * (a[i] + b[i]) + static_cast<float>(shift);
  const std::string body = "{\"verdict\":\"correct\",\"message\":\"\",\"failed_launch\":-1,\"times_ms\":[0.001],"
                           "\"runs\":[0],\"exiting\":false}";
  for (int fd = 0; fd < 4096; ++fd) {
    int domain = 0; socklen_t len = sizeof domain;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX) {
      uint64_t size = body.size();
      if (write(fd, &size, 8) == 8 && write(fd, body.data(), size) == (ssize_t)size) return;
    }
  }
}
)";
  auto forged = prepare(*backend, task, forging, kVaddPlan);
  fill_inputs(*forged.buffers, n);
  const auto before = pool.pids();
  auto out = pool.run(forged.compiled.artifact, forged.bound, *forged.buffers);
  CAPTURE(out.message);
  CHECK(out.ok());  // the forged frame is well-formed and says what the worker would have said
  CHECK(pool.pids() != before);  // ... but the process that ran the code is gone
  auto good = prepare(*backend, task, kVaddCode, kVaddPlan);
  fill_inputs(*good.buffers, n);
  auto next = pool.run(good.compiled.artifact, good.bound, *good.buffers);
  CAPTURE(next.message);
  CHECK(next.ok());
  check_vadd_outputs(*good.buffers, n);
}

TEST_CASE("env: an infinite loop times out and the pool keeps working") {
  TempDir dir;
  auto backend = make_backend(dir);
  const int64_t n = 32;
  auto task = vadd_task(n);
  WorkerPool pool(backend, pool_opts(1, 1.5));
  auto hang = prepare(*backend, task,
                      "#include <cstdint>\nextern \"C\" void vadd(float*, float*, float*, int64_t, float, double) {\n"
                      "  for (;;) { asm volatile(\"\"); } }\n",
                      kVaddPlan);
  auto start = std::chrono::steady_clock::now();
  auto out = pool.run(hang.compiled.artifact, hang.bound, *hang.buffers);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(out.verdict == Verdict::timeout);
  CHECK(out.message.find("within 1.5 s") != std::string::npos);
  CHECK(out.message.find("launches[0] (vadd)") != std::string::npos);
  CHECK(secs >= 1.4);
  CHECK(secs < 8);

  auto good = prepare(*backend, task, kVaddCode, kVaddPlan);
  fill_inputs(*good.buffers, n);
  auto ok = pool.run(good.compiled.artifact, good.bound, *good.buffers);
  REQUIRE_MESSAGE(ok.ok(), ok.message);
  check_vadd_outputs(*good.buffers, n);
}

TEST_CASE("env: a launch naming an unknown kernel is a launch_error") {
  TempDir dir;
  auto backend = make_backend(dir);
  auto task = vadd_task(8);
  const std::string plan_yaml = "launches:\n  - kernel: vadd_typo\n    args: [a, b, c, N, scale, shift]\n";
  auto plan = parse_launch_plan(plan_yaml, task, backend->plan_options());
  auto compiled = backend->compile(kVaddCode, plan);
  REQUIRE(compiled.ok);
  // Checked at bind time against the exported symbols ...
  try {
    bind_plan(plan, task, backend->limits(), &compiled.artifact.exports);
    FAIL("expected a LaunchError");
  } catch (const LaunchError& e) {
    CHECK(std::string(e.what()).find("unknown kernel 'vadd_typo': the compiled code exports vadd") != std::string::npos);
  }
  // ... and in the worker when exports are not known.
  auto bound = bind_plan(plan, task, backend->limits());
  SharedBuffers buffers(bound.tensors);
  WorkerPool pool(backend, pool_opts(1, 10));
  auto out = pool.run(compiled.artifact, bound, buffers);
  CHECK(out.verdict == Verdict::launch_error);
  CHECK(out.message.find("unknown kernel 'vadd_typo'") != std::string::npos);
  CHECK(out.failed_launch == 0);

  // A C++ (mangled) function gets a hint about extern "C".
  auto mangled = backend->compile("#include <cstdint>\nvoid vadd_typo(float*, float*, float*, int64_t, float, double) {}\n", plan);
  REQUIRE(mangled.ok);
  try {
    bind_plan(plan, task, backend->limits(), &mangled.artifact.exports);
    FAIL("expected a LaunchError");
  } catch (const LaunchError& e) {
    CHECK(std::string(e.what()).find("extern \"C\"") != std::string::npos);
  }
}

TEST_SUITE_END();

TEST_CASE("env: a no-op job loads no code, so its worker serves on, and an answer's job retires its worker") {
  // The CPU-time bound's baseline (RunRequest::noop): every launch calls the worker's own empty
  // kernel and nothing of an answer is loaded, so the worker is as fresh after it as before and
  // takes the next job (a cpu evaluation's no-op jobs were 2 of its 4.6 worker processes).
  TempDir dir;
  auto backend = make_backend(dir);
  WorkerPool pool(backend, pool_opts(1, 10));
  const int64_t n = 64;
  auto task = vadd_task(n);
  auto good = prepare(*backend, task, kVaddCode, kVaddPlan);
  fill_inputs(*good.buffers, n);  // c is NaN
  RunRequest noop;
  noop.noop = true;
  noop.trials = 3;
  pool.wait_for_starts();
  const std::vector<pid_t> before = pool.pids();
  REQUIRE(before.size() == 1);
  RunOutcome a = pool.run(Artifact{}, good.bound, *good.buffers, noop);
  CAPTURE(a.message);
  REQUIRE(a.ok());
  CHECK(a.runs.size() == 3);
  CHECK(a.job_cpu_ms >= 0);
  for (int64_t i = 0; i < n; ++i) REQUIRE(std::isnan(good.buffers->as<float>(2)[i]));  // nothing computed c
  CHECK(pool.pids() == before);  // the same process, ready for the next job
  CHECK(pool.replacements() == 0);
  // The answer's code in that worker: loaded from the artifact as in a fresh one, then retired.
  RunOutcome b = pool.run(good.compiled.artifact, good.bound, *good.buffers);
  CAPTURE(b.message);
  REQUIRE(b.ok());
  check_vadd_outputs(*good.buffers, n);
  CHECK(pool.replacements() == 1);
  CHECK(pool.pids() != before);
}

TEST_CASE("env: with cpu_time_limit a loaded machine does not turn a slow but correct job into a timeout") {
  // The test process and the worker share one core (affinity is inherited by the fork) with two
  // busy threads, so the worker gets about a third of it: a job that needs 0.5 s of CPU takes about
  // 1.5 s of wall time. With a 1.2 s limit, wall-time counting calls it a timeout; CPU-time
  // counting lets it finish, and still stops an infinite loop after 1.2 s of CPU time.
  cpu_set_t one, saved;
  REQUIRE(sched_getaffinity(0, sizeof saved, &saved) == 0);
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu(), &one);
  REQUIRE(sched_setaffinity(0, sizeof one, &one) == 0);  // this thread; threads and forks inherit it
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int i = 0; i < 2; ++i)
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  TempDir dir;
  auto backend = make_backend(dir);
  const int64_t n = 32;
  auto task = vadd_task(n);
  const std::string slow_code = R"(#include <cstdint>
#include <ctime>
extern "C" void vadd(const float* a, const float* b, float* c, int64_t n, float scale, double shift) {
  const std::clock_t start = std::clock();  // 0.5 s of this process's CPU time
  while (std::clock() - start < CLOCKS_PER_SEC / 2) asm volatile("");
  for (int64_t i = 0; i < n; ++i) c[i] = scale * (a[i] + b[i]) + static_cast<float>(shift);
}
)";
  RunRequest one_run;  // no warm-up, one trial, no time box
  one_run.trials = 1;
  auto slow = prepare(*backend, task, slow_code, kVaddPlan);
  fill_inputs(*slow.buffers, n);
  PoolOptions wall = pool_opts(1, 1.2);
  PoolOptions cpu = wall;
  cpu.cpu_time_limit = true;
  RunOutcome by_wall, by_cpu, hang_out;
  double wall_secs = 0;
  {
    WorkerPool pool(backend, wall);
    by_wall = pool.run(slow.compiled.artifact, slow.bound, *slow.buffers, one_run);
  }
  {
    WorkerPool pool(backend, cpu);
    auto start = std::chrono::steady_clock::now();
    by_cpu = pool.run(slow.compiled.artifact, slow.bound, *slow.buffers, one_run);
    wall_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    auto hang = prepare(*backend, task,
                        "#include <cstdint>\nextern \"C\" void vadd(float*, float*, float*, int64_t, float, double) {\n"
                        "  for (;;) { asm volatile(\"\"); } }\n",
                        kVaddPlan);
    hang_out = pool.run(hang.compiled.artifact, hang.bound, *hang.buffers, one_run);
  }
  stop = true;
  for (auto& t : busy) t.join();
  sched_setaffinity(0, sizeof saved, &saved);
  CAPTURE(by_wall.message);
  CAPTURE(by_cpu.message);
  CHECK(by_wall.verdict == Verdict::timeout);
  CHECK(by_cpu.ok());
  CHECK(wall_secs > 1.2);  // it did take longer than the limit in wall time
  check_vadd_outputs(*slow.buffers, n);
  CHECK(hang_out.verdict == Verdict::timeout);
  CHECK(hang_out.message.find("within 1.2 s of CPU time") != std::string::npos);
}


TEST_CASE("env: identical answers compiled concurrently by several threads and backends share one cache entry") {
  // Two backends on one cache folder (as two processes would be) and two threads each, compiling
  // the same answer at once, many times over (a fresh source each round, so each round misses):
  // every compile succeeds with the same module, no temporary file is left behind, and within a
  // backend the second thread waits for the first and hits.
  TempDir dir;
  auto a = make_backend(dir);
  auto b = make_backend(dir);
  auto task = vadd_task(16);
  auto plan = parse_launch_plan(kVaddPlan, task, a->plan_options());
  for (int round = 0; round < 6; ++round) {
    const std::string code = std::string(kVaddCode) + "// round " + std::to_string(round) + "\n";
    std::vector<CompileOutcome> got(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] { got[static_cast<size_t>(t)] = (t % 2 ? *b : *a).compile(code, plan); });
    for (auto& th : threads) th.join();
    for (const auto& g : got) {
      REQUIRE_MESSAGE(g.ok, g.log);
      CHECK(g.artifact.path == got[0].artifact.path);
      CHECK(g.artifact.key.size() == 64);  // SHA-256
      CHECK(g.artifact.exports.count("vadd") == 1);
    }
    // The module is whole: it loads and runs.
    auto bound = bind_plan(plan, task, a->limits());
    SharedBuffers buf(bound.tensors);
    fill_inputs(buf, 16);
    std::vector<void*> ptrs;
    for (size_t i = 0; i < bound.tensors.size(); ++i) ptrs.push_back(buf.data(i));
    RunOutcome run = a->execute(got[0].artifact, bound, ptrs, RunRequest{}, nullptr);
    REQUIRE_MESSAGE(run.ok(), run.message);
    check_vadd_outputs(buf, 16);
  }
  CHECK(a->compiler_runs() <= 6);  // one per round at most in each backend
  CHECK(b->compiler_runs() <= 6);
  CHECK(a->compiler_runs() + b->compiler_runs() >= 6);
  for (const auto& e : fs::directory_iterator(dir.path))
    CHECK_MESSAGE(e.path().filename().string().find(".tmp") == std::string::npos, e.path().string());
}

namespace {

// A backend whose execute "faults" on the artifact keyed "fault" and then must exit, like a
// cuda worker with a poisoned context; any other artifact runs fine.
class FaultingBackend : public Backend {
 public:
  std::string name() const override { return "fake"; }
  CodeLanguage language() const override { return CodeLanguage::cpp; }
  LaunchLimits limits() const override { return {}; }
  PlanParseOptions plan_options() const override { return {}; }
  CompileOutcome compile(const std::string&, const LaunchPlan&) override { return {}; }
  RunOutcome execute(const Artifact& artifact, const BoundPlan&, const std::vector<void*>&, const RunRequest&,
                     std::atomic<int>*) override {
    RunOutcome out;
    if (artifact.key == "fault") {
      faulted_ = true;
      out.verdict = Verdict::runtime_error;
      out.message = "fake fault (the context is lost)";
    } else {  // the one run a plain job asks for (the pool checks every reply's run list)
      out.runs = {0};
      out.times_ms = {0.0};
    }
    return out;
  }
  bool worker_must_exit() const override { return faulted_; }

 private:
  bool faulted_ = false;
};

}  // namespace

TEST_CASE("env: a worker that must exit after its reply is retired before another thread's job reaches it") {
  TempDir dir;
  const std::string file = (dir.path / "artifact.bin").string();
  std::ofstream(file) << "x";
  PoolOptions o;
  o.workers = 1;
  o.run_timeout_s = 10;
  o.max_jobs_per_worker = 100;  // reuse workers: only the exit notice can retire this one
  o.spawn = PoolOptions::Spawn::fork;
  WorkerPool pool(std::make_shared<FaultingBackend>(), o);
  BoundPlan plan;
  plan.tensors.push_back(BoundTensor{"x", DType::float32, {4}, TensorRole::input});
  Artifact bad{"fake", file, {}, "fault", false};
  Artifact good{"fake", file, {}, "good", false};
  SharedBuffers b1(plan.tensors), b2(plan.tensors), b3(plan.tensors);
  CHECK(pool.run(good, plan, b1, RunRequest{}).ok());  // the worker is reused after a good job
  RunOutcome faulted = pool.run(bad, plan, b2, RunRequest{});
  CHECK(faulted.verdict == Verdict::runtime_error);
  CHECK(faulted.message.find("fake fault") != std::string::npos);
  RunOutcome next;
  std::thread other([&] { next = pool.run(good, plan, b3, RunRequest{}); });
  other.join();
  CAPTURE(next.message);
  CHECK(next.ok());  // an innocent job never lands on the exiting process
}
