#pragma once
// The verifier: turns a model's answer for a task into a verdict, feedback and timings, following
// every rule of DESIGN.md section 3 (see docs/env.md "Verifier" for the exact procedure).
#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <string>
#include <string_view>

#include "env/backend.hpp"
#include "env/cpu_time_bound.hpp"
#include "env/device_lock.hpp"
#include "env/task_runtime.hpp"
#include "env/verdict.hpp"
#include "env/worker_pool.hpp"

namespace leap::env {

class Evaluation;
class ReferenceCache;

/// Settings of a Verifier (the cli fills them from the experiment's `env:` section).
struct VerifierOptions {
  int seeds = 5;                    ///< correctness seeds, fresh random inputs each
  bool timing = true;               ///< time correct candidates (off: correct has no times)
  int warmup = 3;                   ///< untimed runs before the trials (each side)
  int trials = 20;                  ///< timed trials (each side); the median is reported
  double max_seconds = 2.0;         ///< time box of one side's warm-up + trials, seconds
  int timing_sets = 3;              ///< input sets cycled during timing
  double suspicious_speedup = 10.0; ///< speedups above this are re-measured (strictly) and flagged
  int checked_runs = 6;             ///< timed runs, drawn at random, whose outputs are checked too
  double warmup_ms = 0;             ///< warm-up lasts at least this long too, ms (each side)
  double min_timed_ms = 0;          ///< trials go on until they sum to this, ms (each side)
  int threads = 1;                  ///< at::set_num_threads while the reference runs
  size_t feedback_max_chars = 2000; ///< bound on the feedback text
  uint64_t seed = 0;                ///< base of the input seeds (mixed with the task hash)
  bool profile_feedback = false;    ///< a correct answer's feedback gets env/profile.hpp's line
  double peak_gb_s = 0;             ///< the bandwidth that line states a share of (GB/s); <= 0: none
  std::string peak_name;            ///< what that bandwidth is
  /// Memory for the reference's inputs and outputs kept across evaluations (env/reference_cache.hpp:
  /// the answers of a group share a task and its seeds), MiB; 0: every evaluation computes its own.
  size_t reference_cache_mb = 256;
  /// Runs of a CPU-time check job (up to 4096, docs/env.md "Timing") checked against the
  /// reference: this many, drawn after the job ends (so its code cannot know which), plus each
  /// input set's last run; 0: every run. A strict re-measure checks every run regardless.
  int check_job_sample = 128;
  /// Correctness seeds one worker job may run (cpu backend; each seed in its own input and
  /// output set, as many as fit 64 MiB, at most 8); 1: a fresh worker per seed. cuda: always 1.
  int correctness_seeds_per_job = 8;
  /// A timing job with warmup_ms or min_timed_ms has its checked runs drawn by the worker as
  /// they are made (RunRequest::worker_sample_slots), as on the cuda backend, also on the cpu
  /// backend, whose default is the parent's draw (an answer's host code shares a cpu worker's
  /// memory). Tests only: it runs the cuda path's parent side here.
  bool sample_in_worker = false;
};

/// One environment evaluation path: extract -> parse -> compile -> bind -> correctness on several
/// seeds (the candidate in a worker, the reference here at the same time) -> timing. Thread-safe:
/// concurrent evaluate() calls share the backend (compile cache), the worker pool and the
/// reference cache; the reference runs on any grading thread. The
/// device (the GPU, or the CPU on the cpu backend) is held exclusively while anything is timed:
/// the candidate's timing job and the reference's run back to back in one window, while
/// correctness runs of other threads share it (DeviceLock).
///
/// Where the reference is timed: for a backend whose reference_device() is set (cuda with a GPU)
/// in a worker on that device, TorchScript on CUDA tensors timed like the candidate (same input
/// sets, warm-up, trials, time box, L2 flush, CUDA events; env/cuda_reference.hpp); otherwise here
/// on the CPU. A correct result's details["reference_device"] says which ("cuda:0" or "cpu").
/// Correctness always compares with the reference run here on the CPU.
///
/// Infrastructure errors (Verdict::infra_error, docs/env.md "Infrastructure errors"): a GPU
/// reference that cannot be timed is never replaced by a CPU time; a worker job that replies
/// infra_error (out of device memory) is run once more, and a second such reply is the verdict.
/// details["infra_error"] holds the reason, details["infra_retries"] the jobs run again.
class Verifier {
 public:
  Verifier(std::shared_ptr<Backend> backend, std::shared_ptr<WorkerPool> pool, VerifierOptions options = {});
  ~Verifier();

  /// Evaluates `answer` (the model's full text) for `task`. A fault of the answer is a verdict;
  /// a broken task (its reference fails) or toolchain throws leap::Error.
  EvalResult evaluate(const RuntimeTask& task, std::string_view answer);

  const VerifierOptions& options() const { return options_; }
  Backend& backend() { return *backend_; }
  /// The reference inputs and outputs kept across evaluations (hits and misses in its stats()).
  const ReferenceCache& reference_cache() const { return *reference_cache_; }

 private:
  friend class Evaluation;  // one evaluate call's steps (env/evaluation.hpp)
  std::shared_ptr<Backend> backend_;
  std::shared_ptr<WorkerPool> pool_;
  VerifierOptions options_;
  std::mutex cpu_checks_mutex_;
  std::unordered_map<std::string, CpuUse> cpu_checks_;  ///< by code, plan, task and threads
  /// Keys whose CPU-time check an evaluation is running now: another evaluation of the same code
  /// (a group's repeated samples, graded side by side) waits on cpu_checks_done_ and reads the
  /// kept result rather than running the same check again.
  std::unordered_set<std::string> cpu_checks_running_;
  std::condition_variable cpu_checks_done_;
  std::unique_ptr<ReferenceCache> reference_cache_;
  DeviceLock device_lock_;  // timing windows exclusive, correctness runs shared (env/device_lock.hpp)
};

/// Seed of correctness seed `seed_index` (or timing set `seed_index` >= seeds) for `task`.
uint64_t input_seed(const RuntimeTask& task, uint64_t base, int seed_index);

}  // namespace leap::env
