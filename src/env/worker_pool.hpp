#pragma once
// Worker processes that run generated code, so a crash or a hang costs one worker, never the run.
//
// Each worker is a child of the zygote (env/zygote.hpp: an exec-started `leap` with none of the
// parent's memory and no CUDA state), sandboxed before it gets a job (env/sandbox.hpp), talking
// over a unix socket pair: the parent sends one job (artifact, bound launches, tensor layout as
// JSON) with the SharedBuffers memfd and the artifact's file attached (SCM_RIGHTS); the worker
// maps the memfd, protects the guard pages, calls Backend::execute, and answers with a JSON
// outcome. The parent waits with a limit (CPU or wall time) and watches the worker's resident
// memory: past either, it kills the worker's process group (timeout, runtime_error); if the
// socket closes, it asks the zygote for the exit status and reports the signal (runtime_error).
// Either way a fresh worker replaces it. Workers die with the zygote, which dies with the parent
// (PR_SET_PDEATHSIG); they write no core files and have stdout/stderr on /dev/null.
//
// PoolOptions::Spawn::fork keeps the older path (a plain fork of the parent, no sandbox) behind the
// same interface, for tests whose workers must run a test backend object of the parent's
// (tests/forked_rig.hpp: forged reports, counted jobs) and for bench/env_cpu's spawn comparison;
// it is not safe after the parent started CUDA and is never the default.
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "env/backend.hpp"
#include "env/sandbox.hpp"
#include "env/shared_buffers.hpp"

namespace leap::env {

/// Seconds a reference job (RunRequest::reference) gets on top of PoolOptions::run_timeout_s.
inline constexpr double kReferenceStartupS = 30;

/// Settings of a WorkerPool.
struct PoolOptions {
  int workers = 2;               ///< processes kept ready
  /// Limit of one job (all its trials), seconds: CPU time of the worker process (all its threads)
  /// when `cpu_time_limit`, else wall-clock time.
  double run_timeout_s = 10;
  /// Jobs a worker runs before it is replaced; 1 (default) gives every candidate a fresh
  /// process, so one candidate's global state or heap damage cannot affect the next.
  int max_jobs_per_worker = 1;
  /// Count `run_timeout_s` in the worker's CPU time (user + system, from /proc/PID/stat), so a
  /// loaded machine does not turn a slow but correct answer into a timeout; a job that sleeps or
  /// blocks instead is still stopped at max(3 x run_timeout_s, run_timeout_s + 30 s) of wall time.
  /// Right for the cpu backend, whose candidates compute on the worker's CPU; not for cuda, where
  /// the host thread waits on the GPU.
  bool cpu_time_limit = false;
  /// How workers start: exec (children of the zygote, sandboxed; the default) or fork (a plain
  /// fork of this process, unsandboxed: for tests with a backend of their own, and comparisons).
  enum class Spawn { exec, fork };
  Spawn spawn = Spawn::exec;
  /// The sandbox of every worker (exec mode). A cpu pool limits each worker's memory to
  /// `sandbox.memory_mb` beyond its tensors; cuda workers get no memory limit (the driver maps
  /// large address ranges).
  SandboxOptions sandbox;
};

/// What a worker knows about its own sandbox (worker side of worker_main).
struct WorkerContext {
  bool copy_artifact = false;     ///< load the artifact from its fd via a scratch copy (no host paths)
  /// The write descriptor of the cpu worker's module file (AppliedSandbox::module_fd): the
  /// artifact is copied there, the descriptor closed, and the module loaded from
  /// ChildSandbox::kModulePath; -1: the copy goes to /tmp.
  int module_fd = -1;
  int64_t memory_limit_bytes = 0; ///< memory beyond the tensors; 0 = none
  int64_t base_vm_bytes = 0;      ///< the worker's address-space size before its first job
};

/// Cumulative costs of a pool (bench/env_cpu): starting workers, and jobs from send to reply.
struct PoolStats {
  int64_t spawns = 0;   ///< workers started (at construction and as replacements)
  double spawn_s = 0;   ///< wall seconds spent starting them (mostly on a background thread)
  double wait_s = 0;    ///< wall seconds run() waited for a worker to be ready (on the caller's path)
  int64_t jobs = 0;     ///< jobs run
  double job_s = 0;     ///< wall seconds from sending a job to its outcome, summed
  /// Output tensors the parent copied out of jobs (RunRequest::parent_snapshots: the checked
  /// runs' outputs, into its own memory).
  int64_t snapshot_copies = 0;
};

/// A pool of worker processes for one backend. Thread-safe: concurrent run() calls use
/// different workers (and wait when all are busy).
class WorkerPool {
 public:
  /// Starts `options.workers` workers. Throws leap::Error if a process cannot be started.
  WorkerPool(std::shared_ptr<Backend> backend, PoolOptions options = {});
  /// Kills and reaps every worker.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  /// Runs `plan`'s launches of `artifact` on `buffers` (laid out for `plan.tensors`) in a worker.
  /// Outputs written by the code are visible in `buffers` afterwards. Never throws for a fault
  /// of the code: crashes -> runtime_error (message names the signal and the launch), hangs ->
  /// timeout, unknown kernels -> launch_error. With `request.reference` set, the worker runs and
  /// times the task's reference instead (Backend::time_reference; `artifact` is not used), with
  /// kReferenceStartupS more time.
  RunOutcome run(const Artifact& artifact, const BoundPlan& plan, SharedBuffers& buffers,
                 const RunRequest& request = {});

  /// Number of workers started to replace dead, hung or retired ones.
  int replacements() const { return replacements_.load(); }
  /// Process ids of the current workers (for tests and diagnostics).
  std::vector<pid_t> pids() const;
  /// Waits until no worker is being started in the background (a replacement of a retired one),
  /// so a measurement does not share the CPU with a start-up.
  void wait_for_starts() const;
  /// Costs so far.
  PoolStats stats() const;

 private:
  struct Worker;
  std::unique_ptr<Worker> spawn();  ///< a zygote child, or a fork on the process-wide thread
  std::unique_ptr<Worker> spawn_worker_process();
  std::unique_ptr<Worker> spawn_from_zygote();
  std::string worker_spec() const;  ///< what every worker of this pool is told (computed once)
  std::string worker_spec_;
  void check_ready(Worker& w);  ///< reads a new worker's ready message; throws if its sandbox failed
  int wait_status(Worker& w);  ///< reaps a dead (or killed) worker: its wait status
  void retire(Worker& w, bool kill_first);

  // run()'s steps (worker_pool.cpp).
  struct Exchange;  ///< one job's exchange with its worker
  /// Waits for a free slot (a ready worker first) and marks it busy.
  size_t acquire_slot();
  /// Returns `slot` to the pool: with a live worker, or empty for the background thread to fill
  /// (`refill`: a ready spare takes its place at once when there is one), or for the next run().
  void release_slot(size_t slot, std::unique_ptr<Worker> w, bool refill = false);
  /// The slot's worker, started when the slot is empty; the slot is released if that throws.
  std::unique_ptr<Worker> checkout(size_t slot);
  /// Sends the job (its memory and artifact as open descriptors); a worker that died while idle is
  /// replaced once. Throws leap::Error (slot released) when a fresh worker cannot take it either.
  void send_job(size_t slot, std::unique_ptr<Worker>& w, const Artifact& artifact, const BoundPlan& plan,
                SharedBuffers& buffers, const RunRequest& request, Exchange& x);
  /// The mapped / go / per-run exchange up to the reply frame, under the job's limits.
  void await_reply(Worker& w, const BoundPlan& plan, SharedBuffers& buffers, const RunRequest& request, Exchange& x);
  /// Decodes and checks the (untrusted) reply into `out`; true when the worker must be retired.
  bool decode_checked_reply(const BoundPlan& plan, const RunRequest& request, const Exchange& x, double cpu_at_reply,
                            RunOutcome& out);
  /// The outcome of a job that ended without a reply (limit, stall, crash); kills the worker.
  RunOutcome failed_job_outcome(Worker& w, const BoundPlan& plan, const RunRequest& request, const Exchange& x);

  std::shared_ptr<Backend> backend_;
  PoolOptions options_;
  mutable std::mutex mutex_;
  mutable std::condition_variable idle_cv_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<bool> busy_;
  /// Slots whose retired worker a background thread is replacing (run() returns without waiting
  /// for the new process; the next job finds it ready).
  std::vector<bool> refill_;
  /// Ready workers kept in reserve (as many as there are slots), started by the background
  /// thread, so a retired worker's slot is filled at once.
  std::deque<std::unique_ptr<Worker>> spares_;
  void refill_loop();
  std::thread refill_thread_;
  std::condition_variable refill_cv_;
  bool stopping_ = false;
  std::atomic<int> replacements_{0};
  int64_t memory_limit_mb_ = 0;  ///< resolved limit of a cpu worker (0 = none)
  mutable std::mutex stats_mutex_;
  PoolStats stats_;
};

/// Worker side: serves jobs from `socket_fd` with `backend` until the socket closes; returns
/// the process exit status. Called in a child of the zygote (or a forked child in fork mode).
int worker_main(int socket_fd, Backend& backend, std::atomic<int>* current_launch, const WorkerContext& context = {});

}  // namespace leap::env
