#pragma once
// Worker processes that run generated code, so a crash or a hang costs one worker, never the run.
//
// Each worker is a child forked from the parent, talking over a unix socket pair: the parent
// sends one job (artifact, bound launches, tensor layout as JSON) with the SharedBuffers memfd
// attached (SCM_RIGHTS); the worker maps it, protects the guard pages, calls Backend::execute,
// and answers with a JSON outcome. The parent waits with a wall-clock limit: past it, it kills
// the worker (timeout); if the socket closes, it reaps the worker and reports the signal
// (runtime_error). Either way a fresh worker replaces it. Workers die with the parent
// (PR_SET_PDEATHSIG), write no core files, and have stdout/stderr on /dev/null.
//
// fork() without exec is right for the cpu backend; a cuda backend must not fork a parent whose
// CUDA context exists, so it will start workers by exec'ing `leap` with the socket fd instead
// (worker_main below is the entry point either way).
#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "env/backend.hpp"
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

 private:
  struct Worker;
  std::unique_ptr<Worker> spawn();  ///< forks on a process-wide thread (see worker_pool.cpp)
  std::unique_ptr<Worker> spawn_worker_process();
  void retire(Worker& w, bool kill_first);

  std::shared_ptr<Backend> backend_;
  PoolOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable idle_cv_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<bool> busy_;
  std::atomic<int> replacements_{0};
};

/// Worker side: serves jobs from `socket_fd` with `backend` until the socket closes; returns
/// the process exit status. Called in a forked child (or, later, an exec'd `leap` process).
int worker_main(int socket_fd, Backend& backend, std::atomic<int>* current_launch);

}  // namespace leap::env
