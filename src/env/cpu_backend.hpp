#pragma once
// The cpu backend: ```cpp solutions compiled by the host compiler into a shared object, whose
// extern "C" functions are called in order inside a worker process.
//
// Calling convention: a launch calls `kernel(args...)` with each argument in its real C type:
// a tensor as a pointer to its first element, an expression or int64 constant as int64_t, a
// float32 constant as float, a float64 constant as double. Since the parameter list is only
// known from the launch plan, compile() adds a generated translation unit with one trampoline
// per distinct signature, e.g. for "ppi":
//   extern "C" void __leap_call_ppi(void* fn, const LeapCpuArg* a) {
//     ((void (*)(void*, void*, int64_t))fn)(a[0].p, a[1].p, a[2].i); }
// The trampoline is compiled in its own file, so the kernel's own declaration (const float*,
// int, ...) is not needed there: on x86-64 and AArch64 any pointer type and int64_t share the
// integer registers, float and double the vector registers. grid and block are ignored.
#include <atomic>
#include <cstdint>
#include <memory>
#include <chrono>
#include <mutex>
#include <unordered_map>
#include <string>
#include <vector>

#include "env/backend.hpp"
#include "env/compile_cache.hpp"
#include "env/sandbox.hpp"
#include "util/subprocess.hpp"

namespace leap::env {

/// The largest compiled module the cpu backend accepts, bytes: a cpu worker writes its module to
/// its own /code under RLIMIT_FSIZE 64 MB (env/sandbox.hpp). A larger one is a compile_error.
inline constexpr uintmax_t kMaxModuleBytes = uintmax_t(64) << 20;
/// Compile time-outs a CpuBackend remembers (CpuBackend::compile) before it forgets them all.
inline constexpr size_t kMaxTimedOutKeys = 10000;
/// Failures that look like the host's a CpuBackend remembers at once (host_failure_memory_s),
/// each with at most kMaxHostFailureLogBytes of its log: at most ~20 MB. Expired ones are
/// dropped at every new one (a red team's 200 distinct such answers grew a process by 0.9 MB each).
inline constexpr size_t kMaxHostFailures = 1000;
inline constexpr size_t kMaxHostFailureLogBytes = size_t(16) << 10;

/// Settings of the cpu backend.
struct CpuBackendOptions {
  std::string compiler = "g++";
  /// Flags before the sources; `-o module.so` follows the sources. `-Wl,--no-undefined` turns
  /// a call to an undefined function into a compile error instead of a load failure.
  /// `-std=gnu++20`: set, not the compiler's default (g++ 12 defaulted to gnu++17, and std::span was
  /// a compile_error for a new user's honest answer).
  std::vector<std::string> flags = {"-std=gnu++20", "-O3", "-march=native", "-fPIC", "-shared", "-Wl,--no-undefined"};
  std::string cache_dir;            ///< compiled modules; empty = $TMPDIR/leap-cpu-cache-<uid>
  double compile_timeout_s = 60;    ///< compiler wall-clock limit, seconds
  size_t feedback_chars = 2000;     ///< bound on compile feedback, characters
  int feedback_errors = 5;          ///< compiler errors kept in the feedback
  /// The compiler (and nm) run in the zygote's sandbox (env/zygote.hpp: no network, a minimal
  /// read-only root with the build folder writable, no privileges); off runs them directly.
  SandboxMode sandbox = SandboxMode::auto_;
  /// A failed compile that looks like the host's (compile_failure_is_the_answers false: never
  /// in the compile cache) is remembered by this backend for this long, seconds: the same answer
  /// graded again within it gets the same compile_error without a compiler run. The log's words
  /// are partly the answer's (a diagnostic quotes its strings: a static_assert message holding a
  /// newline and "g++: fatal error: Killed signal" kept a red team's failure out of the cache and
  /// cost a full compile at every resubmission), so they decide only this short memory. 0: none.
  double host_failure_memory_s = 120;
  /// Most bytes of scratch one plan may declare, all buffers together (0: unchecked). Scratch
  /// lives in a memory both the worker and the grader map, outside the worker's own memory limit,
  /// and the grader zero-fills it before every run: a red team's unused 4-GiB scratch cost 20-29 s
  /// and 4 GB of the grader's memory whatever env.worker_memory_mb said (2026-12-07). The
  /// environment sets min(kMaxCpuScratchBytes, env.worker_memory_mb).
  int64_t max_scratch_bytes = 0;
};

/// The cpu backend's own ceiling on one plan's scratch: 256 MiB (a zero-fill of 12-25 ms a run on
/// the 2-core development machine; a [4096, 4096] float32 workspace is 64 MiB). At 1 GiB an unused
/// scratch still cost the grader 9-21 s and 1.5-2.5 GB for one trivial answer (a red team,
/// 2026-12-08).
inline constexpr int64_t kMaxCpuScratchBytes = int64_t(256) << 20;

/// Generated source of the trampolines for `signatures` (see the file comment).
std::string cpu_trampoline_source(const std::vector<std::string>& signatures);

/// True when a failed compile `result` is the answer's own (the compiler exited with a diagnostic
/// about the code), false for the host's failures (the compiler or a sub-process killed, out of
/// memory, a fork refused, a full disk, a time-out, an internal compiler error). Only the
/// answer's own failures are kept in the compile cache (issue "Environment V").
bool compile_failure_is_the_answers(const util::ProcessResult& result);

/// Host-compiler backend with an on-disk compile cache (env/compile_cache.hpp) keyed by the
/// SHA-256 of the source, the trampolines, the compiler, its flags and its `--version` text.
class CpuBackend : public Backend {
 public:
  explicit CpuBackend(CpuBackendOptions options = {});
  /// The execute side only, inside a worker process: creates no folder and runs no compiler.
  CpuBackend(CpuBackendOptions options, WorkerSide);

  std::string name() const override { return "cpu"; }
  CodeLanguage language() const override { return CodeLanguage::cpp; }
  LaunchLimits limits() const override;
  PlanParseOptions plan_options() const override;
  CompileOutcome compile(const std::string& code, const LaunchPlan& plan) override;
  RunOutcome execute(const Artifact& artifact, const BoundPlan& plan, const std::vector<void*>& tensors,
                     const RunRequest& request, std::atomic<int>* current_launch) override;

  /// How many times the compiler actually ran (cache misses), for tests and metrics.
  int compiler_runs() const { return compiler_runs_.load(); }
  /// The cache directory in use.
  const std::string& cache_dir() const { return options_.cache_dir; }

  /// On the worker side, true once a job has loaded code: the worker exits after that job.
  bool worker_must_exit() const override { return keep_loaded_ && loaded_; }
  /// A forked worker keeps loaded code too (no dlclose, so no __cxa_finalize on a lock the fork
  /// may have left held), and so exits after the job as an exec'd worker does.
  void in_forked_worker() override { keep_loaded_ = true; }
  /// In the parent: a cpu worker is retired after every job (Backend::worker_serves_one_job).
  bool worker_serves_one_job() const override { return true; }
  /// Failures that look like the host's remembered now (host_failure_memory_s; for tests).
  size_t host_failures_remembered() const {
    std::lock_guard<std::mutex> lock(timed_out_mutex_);
    return host_failed_.size();
  }

 private:
  const std::string& compiler_version();
  CpuBackendOptions options_;
  std::unique_ptr<CompileCache> cache_;  // null on the worker side
  /// On the worker side the loaded code is never unloaded: a worker serves one job and ends with
  /// _exit, so no destructor or exit handler of the code runs after its last timed call.
  bool keep_loaded_ = false;
  bool loaded_ = false;  ///< some code was loaded (and kept): the worker exits after its reply
  std::atomic<int> compiler_runs_{0};
  std::mutex version_mutex_;
  std::string compiler_version_;
  /// Keys whose compile timed out in this process, with their feedback: the same answer graded
  /// again (a group's duplicates, a later step) gets that timeout at once instead of holding a
  /// grading thread for env.compile_timeout_s again. Kept in memory only, never in the compile
  /// cache: a loaded machine may be the cause, and a later run compiles it afresh.
  mutable std::mutex timed_out_mutex_;
  std::unordered_map<std::string, std::string> timed_out_;
  /// Keys whose compile failed the host's way (CpuBackendOptions::host_failure_memory_s), with
  /// the outcome served again and when it is forgotten; under timed_out_mutex_.
  struct HostFailure {
    std::string feedback, log;
    std::chrono::steady_clock::time_point until;
  };
  std::unordered_map<std::string, HostFailure> host_failed_;
  /// Keeps `out` (a failure that looks like the host's) under `key` for host_failure_memory_s.
  void remember_host_failure(const std::string& key, const CompileOutcome& out);
};

}  // namespace leap::env
