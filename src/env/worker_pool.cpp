#include "env/worker_pool.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <optional>
#include <string>
#include <thread>
#include <nlohmann/json.hpp>

#include "env/fd_socket.hpp"
#include "env/job_frame.hpp"
#include "env/forker.hpp"
#include "env/reply_check.hpp"
#include "env/run_sample.hpp"
#include "env/timing_schedule.hpp"
#include "env/worker_backend.hpp"
#include "env/worker_job.hpp"
#include "env/worker_process.hpp"
#include "env/zygote.hpp"
#include "util/error.hpp"
#include <spdlog/spdlog.h>

namespace leap::env {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

/// The CPU time of process `pid` (all its threads, live and exited) in ms, with the kernel's
/// nanosecond accounting (the process's CPU clock); -1 when it cannot be read.
double process_cpu_ms(pid_t pid) {
  clockid_t clock;
  if (clock_getcpuclockid(pid, &clock) != 0) return -1;
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

/// The CPU time of process `pid`'s main thread alone (ms, the scheduler's nanosecond run time in
/// /proc/PID/task/PID/schedstat); -1 when it cannot be read.
double main_thread_cpu_ms(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/schedstat";
  std::ifstream in(path);
  unsigned long long ns = 0;
  if (!(in >> ns)) return -1;
  return static_cast<double>(ns) * 1e-6;
}

// CPU time (user + system, all threads) process `pid` has used, seconds; 0 if it cannot be read.
double process_cpu_seconds(pid_t pid) { return std::max(0.0, process_cpu_ms(pid)) * 1e-3; }

/// A thread's run-queue wait counts for the idle stop up to this many times its own CPU time.
/// Summed over threads, waits can exceed the wall time: a red team's 400 threads, each woken
/// every 8 s to spin 0.5 ms, claimed tens of seconds of "waiting for a CPU" per burst and held a
/// grader to the wall-clock backstop on a fraction of a second of CPU (2026-12-06). Capped, a
/// job escapes the stop only by using at least 1/(kWaitPerCpu + 1) of a core throughout, and is
/// then stopped by its CPU-time limit or the backstop, whichever comes first, having paid that
/// CPU as a slow kernel would; an honest thread's wait
/// exceeds the cap only when it gets less than a fifth of a core (a machine loaded 5 times over).
constexpr double kWaitPerCpu = 4;

/// Seconds the live threads of process `pid` have spent runnable but waiting for a CPU (the
/// second field of each /proc/PID/task/TID/schedstat), each thread's capped at kWaitPerCpu x its
/// own CPU time (the first field): on a loaded machine, wall time a job spends neither computing
/// nor asleep. Threads that have exited are not counted.
double runqueue_wait_seconds(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task";
  double total_ns = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::ifstream in(it->path() / "schedstat");
    unsigned long long run_ns = 0, wait_ns = 0;
    if (in >> run_ns >> wait_ns)
      total_ns += std::min(static_cast<double>(wait_ns), kWaitPerCpu * static_cast<double>(run_ns));
  }
  return total_ns * 1e-9;
}

// What the pool watches of a worker, from /proc/PID/status: its own memory (anonymous plus shared
// memory, less the tensors it was given: MAP_SHARED|MAP_ANONYMOUS pages count too) and its threads.
struct ProcessUse {
  int64_t memory_bytes = 0;
  int64_t threads = 0;
};
ProcessUse process_use(pid_t pid, int64_t tensor_bytes) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  ProcessUse u;
  int64_t anon_kb = 0, shmem_kb = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("RssAnon:", 0) == 0) anon_kb = std::atoll(line.c_str() + 8);
    else if (line.rfind("RssShmem:", 0) == 0) shmem_kb = std::atoll(line.c_str() + 9);
    else if (line.rfind("Threads:", 0) == 0) u.threads = std::atoll(line.c_str() + 8);
  }
  const int64_t shmem = shmem_kb * 1024;
  u.memory_bytes = anon_kb * 1024 + std::max<int64_t>(0, shmem - tensor_bytes);
  return u;
}

/// Seconds the rest of a frame may take once its first byte arrived.
constexpr double kFrameBodyS = 5;

/// A job limited by CPU time is stopped once it has spent this many seconds, plus kIdleShare of
/// its limit, neither computing (its CPU time, all threads) nor waiting for a CPU (its threads'
/// run-queue waits): asleep or blocked. cpu code has nothing to wait for, so an answer that
/// sleeps holds a grader seconds, not the wall-clock backstop's minutes (3 x an 80-s timing
/// job's limit was 4 minutes, 2026-12-06).
constexpr double kIdleAllowS = 10;
constexpr double kIdleShare = 0.1;

/// What WorkerPool watches while it waits for a frame of a worker.
struct WatchLimits {
  double limit_s = 0;           ///< CPU seconds (cpu_time) or wall seconds; <= 0: none
  bool cpu_time = false;        ///< limit_s counts the worker's CPU time
  int64_t memory_limit = 0;     ///< bytes of the worker's own memory; 0: none
  int64_t max_threads = 0;      ///< with memory_limit
  int64_t tensor_bytes = 0;     ///< the job's shared tensors (not the worker's own memory)
  bool idle_limit = false;      ///< with cpu_time: stop the job once it idles (kIdleAllowS)
};

/// How a wait for a frame ended.
struct Watched {
  Recv r = Recv::ok;
  bool cpu_limited = false;     ///< timeout: the CPU-time limit
  bool over_memory = false;     ///< timeout: the memory limit
  int64_t threads = 0;          ///< timeout: the thread count past the limit
  bool stalled = false;         ///< timeout: a frame began but did not finish within kFrameBodyS
  double idle_s = 0;            ///< timeout: seconds it spent asleep or blocked (WatchLimits::idle_limit)
  size_t bytes_read = 0;        ///< stalled: how far it got
  uint64_t length = 0;          ///< stalled: the length its header announced
};

/// When a job's limits started counting: the wall clock and the worker's CPU seconds then.
struct WatchStart {
  Clock::time_point at{};
  double cpu_s = 0;
  double queued_s = 0;   ///< runqueue_wait_seconds then (WatchLimits::idle_limit)
  double excused_s = 0;  ///< seconds since then the worker waited on the parent (its run reports)
  /// Idle seconds of the job's earlier runs (RunRequest::timeout_per_run renews the CPU-time limit
  /// and backstop per run, not the idle allowance: a red team's answer that slept 9 s a call,
  /// under each run's allowance, held a grader 62 s over 5 correctness seeds, 2026-12-08).
  double idle_before_s = 0;
  bool set = false;
  static WatchStart now(pid_t pid, const WatchLimits& lim) {
    WatchStart w;
    w.at = Clock::now();
    w.cpu_s = lim.cpu_time ? process_cpu_seconds(pid) : 0.0;
    w.queued_s = lim.cpu_time && lim.idle_limit ? runqueue_wait_seconds(pid) : 0.0;
    w.set = true;
    return w;
  }
};

/// Seconds worker `pid` spent since `since` neither computing nor waiting for a CPU (asleep or
/// blocked; the parent's excused time left out), 0 without an idle limit.
double idle_since(pid_t pid, const WatchStart& since, const WatchLimits& lim) {
  if (!lim.cpu_time || !lim.idle_limit) return 0;
  const double wall = std::chrono::duration<double>(Clock::now() - since.at).count() - since.excused_s;
  const double used = process_cpu_seconds(pid) - since.cpu_s;
  return std::max(0.0, wall - used - std::max(0.0, runqueue_wait_seconds(pid) - since.queued_s));
}

/// Waits for one whole frame of worker `pid` on `sock` (into `frame`), watching its CPU time,
/// wall time, memory and threads every 50 ms until the frame is complete. The limits count from
/// `since` (a job that sends several frames keeps one budget), else from now.
Watched await_frame(pid_t pid, int sock, std::string& frame, const WatchLimits& lim, WatchStart since = {}) {
  Watched out;
  if (!since.set) since = WatchStart::now(pid, lim);
  const auto start = since.at;
  auto after = [&](double s) { return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  const double limit = lim.limit_s > 0 ? lim.limit_s : 1e9;  // none: about 30 years
  const auto wall_cap = after(lim.cpu_time ? std::max(3 * limit, limit + 30) : limit);
  const double cpu0 = since.cpu_s;
  const double idle_allow = kIdleAllowS + kIdleShare * std::min(limit, 1e6);
  FrameReader reader;
  std::optional<Clock::time_point> body_deadline;
  auto next_check = Clock::now();
  auto next_idle_check = Clock::now();
  for (;;) {
    auto until = std::min(Clock::now() + std::chrono::milliseconds(50), wall_cap);
    if (body_deadline) until = std::min(until, *body_deadline);
    const Recv w = wait_for_frame(sock, true, until);
    if (w == Recv::ok) {
      const Recv s = reader.step(sock, kMaxReplyBytes);
      if (s == Recv::ok) {
        frame = std::move(reader.body());
        out.r = Recv::ok;
        return out;
      }
      if (s != Recv::timeout) return out.r = s, out;
      if (!body_deadline && reader.started())
        body_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(kFrameBodyS));
    } else if (w != Recv::timeout) {
      return out.r = w, out;
    }
    const auto now = Clock::now();
    out.r = Recv::timeout;
    if (body_deadline && now >= *body_deadline) {
      out.stalled = true;
      out.bytes_read = reader.bytes_read();
      out.length = reader.length();
      return out;
    }
    if (now >= wall_cap) return out;
    if (now < next_check) continue;
    next_check = now + std::chrono::milliseconds(50);
    const double used = lim.cpu_time ? process_cpu_seconds(pid) - cpu0 : 0;
    if (lim.cpu_time && used >= limit) return out.cpu_limited = true, out;
    if (lim.cpu_time && lim.idle_limit && now >= next_idle_check) {
      // Asleep or blocked: wall time that was neither CPU time nor a wait for a CPU (read only once
      // the wall time less the CPU time is past the allowance, at most once a second).
      const double wall = std::chrono::duration<double>(now - start).count() - since.excused_s;
      if (wall - used + since.idle_before_s > idle_allow) {
        next_idle_check = now + std::chrono::seconds(1);
        const double idle =
            wall - used - std::max(0.0, runqueue_wait_seconds(pid) - since.queued_s) + since.idle_before_s;
        if (idle > idle_allow) return out.idle_s = idle, out;
      }
    }
    if (lim.memory_limit > 0) {
      const ProcessUse use = process_use(pid, lim.tensor_bytes);
      if (use.memory_bytes > lim.memory_limit) return out.over_memory = true, out;
      if (use.threads > lim.max_threads) return out.threads = use.threads, out;
    }
  }
}

/// The parent's copies after run `run` of a job with RunRequest::parent_snapshots: the outputs of
/// the run's input set into the snapshot tensors (or the parent's own snapshot store), if the run
/// is a checked one. Returns how many tensors it copied.
/// A run that is not checked: its outputs (`positions`) copied into the request's decoy, the
/// same bytes a checked run's copy moves (RunRequest::snapshot_decoy).
void copy_decoy(const RunRequest& request, const BoundPlan& plan, SharedBuffers& buffers, size_t set,
                const std::vector<int>& positions) {
  if (!request.snapshot_decoy) return;
  size_t at = 0;
  for (int position : positions) {
    const size_t src = rotated_tensor(request, set, position);
    const size_t bytes = plan.tensors.at(src).bytes();
    if (at + bytes > request.snapshot_decoy->size()) return;
    std::memcpy(request.snapshot_decoy->data() + at, buffers.data(src), bytes);
    at += bytes;
  }
}

int copy_snapshot(const RunRequest& request, const BoundPlan& plan, SharedBuffers& buffers, int run) {
  if (request.sample && request.snapshot_store) {  // drawn now that the run is done
    const int slot = request.sample->offer(run);
    const size_t set = static_cast<size_t>(run) % std::max<size_t>(1, request.rotations.size());
    if (slot < 0) {
      copy_decoy(request, plan, buffers, set, request.sample->outputs());
      return 0;
    }
    const auto& outputs = request.sample->outputs();
    for (size_t j = 0; j < outputs.size(); ++j) {
      const size_t src = rotated_tensor(request, set, outputs[j]);
      const auto* from = static_cast<const std::byte*>(buffers.data(src));
      request.snapshot_store->at(static_cast<size_t>(slot) * outputs.size() + j)
          .assign(from, from + plan.tensors.at(src).bytes());
    }
    return static_cast<int>(outputs.size());
  }
  const Snapshot* snap = snapshot_for_run(request, run);
  const size_t set = static_cast<size_t>(run) % std::max<size_t>(1, request.rotations.size());
  if (!snap) {
    if (request.snapshot_store && !request.snapshots.empty()) {
      std::vector<int> positions;
      for (const auto& copy : request.snapshots.front().copies) positions.push_back(copy.first);
      copy_decoy(request, plan, buffers, set, positions);
    }
    return 0;
  }
  for (const auto& [position, dst] : snap->copies) {
    const size_t src = rotated_tensor(request, set, position);
    const size_t bytes = plan.tensors.at(src).bytes();
    if (request.snapshot_store) {
      const auto* from = static_cast<const std::byte*>(buffers.data(src));
      request.snapshot_store->at(static_cast<size_t>(dst)).assign(from, from + bytes);
    } else {
      std::memcpy(buffers.data(static_cast<size_t>(dst)), buffers.data(src), bytes);
    }
  }
  return static_cast<int>(snap->copies.size());
}

/// The parent's zero-fill of a job's scratch buffers between runs (RunRequest::parent_zeroes_scratch):
/// its own CPU, not the worker's.
void zero_scratch(const BoundPlan& plan, SharedBuffers& buffers) {
  for (size_t ti = 0; ti < plan.tensors.size(); ++ti)
    if (plan.tensors[ti].role == TensorRole::scratch && plan.tensors[ti].bytes()) buffers.zero(ti);
}

std::string signal_text(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* desc = strsignal(sig);
  std::string s = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
  if (desc) s += std::string(" (") + desc + ")";
  return s;
}

std::string launch_text(const BoundPlan& plan, int i) {
  if (i < 0 || i >= static_cast<int>(plan.launches.size())) return "";
  return " in launches[" + std::to_string(i) + "] (" + plan.launches[static_cast<size_t>(i)].kernel + ")";
}

void reap(pid_t pid, int* status) {
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

// ---- parent side ----------------------------------------------------------------------------

struct WorkerPool::Worker {
  pid_t pid = -1;
  int sock = -1;
  std::atomic<int>* current_launch = nullptr;  // in a shared page, written by the worker
  int jobs = 0;
  bool zygote_child = false;  // reaped through the zygote (exec mode), else by waitpid here
  bool ready_pending = false; // its "ready" message (the sandbox report) is not read yet
};

WorkerPool::WorkerPool(std::shared_ptr<Backend> backend, PoolOptions options)
    : backend_(std::move(backend)), options_(options) {
  if (options_.workers < 1) options_.workers = 1;
  if (backend_->name() == "cpu") memory_limit_mb_ = resolved_memory_mb(options_.sandbox.memory_mb);
  worker_spec_ = worker_spec();
  if (options_.spawn == PoolOptions::Spawn::exec) {
    const SandboxReport report = Zygote::for_backend(backend_->name()).report();
    if (options_.sandbox.mode == SandboxMode::strict && !report.complete())
      throw Error("env.sandbox is strict, but this host lacks: " + [&] {
        std::string m;
        for (const auto& x : report.missing) m += (m.empty() ? "" : "; ") + x;
        return m;
      }());
    static std::once_flag said;
    if (options_.sandbox.mode != SandboxMode::off && !report.complete())
      std::call_once(said, [&] { spdlog::warn("{} (env.sandbox: strict refuses to run so)", report.summary()); });
  }
  for (int i = 0; i < options_.workers; ++i) {
    workers_.push_back(spawn());
    busy_.push_back(false);
    refill_.push_back(false);
  }
  try {
    for (auto& w : workers_) check_ready(*w);  // a broken sandbox fails here, not at the first job
  } catch (...) {
    for (auto& w : workers_)
      if (w) retire(*w, true);
    throw;
  }
  refill_thread_ = std::thread([this] { refill_loop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  refill_cv_.notify_all();
  if (refill_thread_.joinable()) refill_thread_.join();
  for (auto& w : workers_)
    if (w) retire(*w, true);
  for (auto& w : spares_)
    if (w) retire(*w, true);
}

void WorkerPool::refill_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  bool spawn_failed = false;  // stop making spares after a failure (run() reports it)
  for (;;) {
    size_t slot = refill_.size();
    refill_cv_.wait(lock, [&] {
      if (stopping_) return true;
      for (size_t i = 0; i < refill_.size(); ++i)
        if (refill_[i] && !busy_[i]) return slot = i, true;
      return !spawn_failed && spares_.size() < workers_.size();
    });
    if (stopping_) return;
    if (slot < refill_.size() && !spares_.empty()) {  // a spare fills the slot at once
      workers_[slot] = std::move(spares_.front());
      spares_.pop_front();
      refill_[slot] = false;
      idle_cv_.notify_all();
      continue;
    }
    if (slot < refill_.size()) busy_[slot] = true;
    lock.unlock();
    std::unique_ptr<Worker> w;
    try {
      w = spawn();
    } catch (...) {
      // Left empty: the next run() on this slot starts one itself (and reports the error).
    }
    lock.lock();
    spawn_failed = !w;
    if (slot < refill_.size()) {
      workers_[slot] = std::move(w);
      busy_[slot] = false;
      refill_[slot] = false;
      idle_cv_.notify_all();
    } else if (w) {
      spares_.push_back(std::move(w));
    }
  }
}

std::unique_ptr<WorkerPool::Worker> WorkerPool::spawn() {
  const auto t0 = Clock::now();
  auto w = options_.spawn == PoolOptions::Spawn::exec ? spawn_from_zygote()
                                                      : Forker::get().run([this] { return spawn_worker_process(); });
  std::lock_guard<std::mutex> lock(stats_mutex_);
  ++stats_.spawns;
  stats_.spawn_s += std::chrono::duration<double>(Clock::now() - t0).count();
  return w;
}

PoolStats WorkerPool::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

std::string WorkerPool::worker_spec() const {
  const bool cpu = backend_->name() == "cpu";
  const SandboxOptions& sb = options_.sandbox;
  // cuda workers: the driver needs /dev, /proc and /sys, and maps large address ranges, so they
  // see the host's tree read-only and keep their uid; the code they run is device code only.
  return json{{"backend", json::parse(backend_->worker_spec())},
              {"mode", to_string(sb.mode)},
              {"fs", !sb.filesystem.empty() ? sb.filesystem : cpu ? "minimal" : "host_readonly"},
              {"drop_privileges", cpu},
              {"memory_mb", memory_limit_mb_},
              {"scratch_mb", sb.scratch_mb},
              {"file_size_mb", sb.file_size_mb},
              {"open_files", cpu ? sb.open_files : std::max<int64_t>(sb.open_files, 65536)}}
      .dump();
}

std::unique_ptr<WorkerPool::Worker> WorkerPool::spawn_from_zygote() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error(std::string("worker socketpair: ") + std::strerror(errno));
  int page_fd = memfd_create("leap-worker-status", MFD_CLOEXEC);
  void* page = MAP_FAILED;
  if (page_fd >= 0 && ftruncate(page_fd, kStatusPageBytes) == 0)
    page = mmap(nullptr, kStatusPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, page_fd, 0);
  if (page == MAP_FAILED) {
    const int e = errno;
    close(sv[0]);
    close(sv[1]);
    if (page_fd >= 0) close(page_fd);
    throw Error(std::string("worker status page: ") + std::strerror(e));
  }
  auto* status = new (page) std::atomic<int>(-1);
  new (memory_flag_of(status)) std::atomic<int>(0);
  auto w = std::make_unique<Worker>();
  w->sock = sv[0];
  w->current_launch = status;
  w->zygote_child = true;
  try {
    w->pid = Zygote::for_backend(backend_->name()).spawn_worker(worker_spec_, sv[1], page_fd);
  } catch (...) {
    close(sv[1]);
    close(page_fd);
    retire(*w, true);
    throw;
  }
  close(sv[1]);
  close(page_fd);
  // The worker says whether its sandbox is in place before it takes its first job; that message
  // is read then (check_ready), so starting a spare costs the background thread only the fork.
  w->ready_pending = true;
  return w;
}

void WorkerPool::check_ready(Worker& w) {
  if (!w.ready_pending) return;
  w.ready_pending = false;
  std::string ready;
  Recv r = recv_frame(w.sock, ready, true, Clock::now() + std::chrono::seconds(60));
  std::string why;
  if (r != Recv::ok) {
    why = "the worker did not start (no ready message)";
  } else {
    try {
      json j = json::parse(ready);
      if (!j.at("ok").get<bool>()) why = j.at("error").get<std::string>();
    } catch (const std::exception& e) {
      why = std::string("garbled ready message: ") + e.what();
    }
  }
  if (!why.empty()) {
    retire(w, true);
    throw Error("cannot start a sandboxed worker (env.sandbox: " + std::string(to_string(options_.sandbox.mode)) +
                "): " + why);
  }
}

int WorkerPool::wait_status(Worker& w) {
  int st = 0;
  if (w.pid <= 0) return st;
  if (w.zygote_child) {
    kill(-w.pid, SIGKILL);  // the whole process group: nothing the job started outlives it
    kill(w.pid, SIGKILL);   // (no-op for a process that already died: its status is kept)
    try {
      st = Zygote::for_backend(backend_->name()).wait(w.pid);
    } catch (const std::exception&) {
      st = 0;
    }
  } else {
    reap(w.pid, &st);
  }
  w.pid = -1;
  return st;
}

std::unique_ptr<WorkerPool::Worker> WorkerPool::spawn_worker_process() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error(std::string("worker socketpair: ") + std::strerror(errno));
  void* page = mmap(nullptr, kStatusPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    close(sv[0]);
    close(sv[1]);
    throw Error(std::string("worker status mmap: ") + std::strerror(errno));
  }
  auto* status = new (page) std::atomic<int>(-1);
  new (memory_flag_of(status)) std::atomic<int>(0);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    munmap(page, kStatusPageBytes);
    throw Error(std::string("cannot fork a worker: ") + std::strerror(e));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    for (int s = 1; s < NSIG; ++s)
      if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, nullptr);
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 1);
      dup2(devnull, 2);
    }
    int sock = sv[1];
    if (sock > 3) close_range(3, static_cast<unsigned>(sock) - 1, 0);
    close_range(static_cast<unsigned>(sock) + 1, ~0U, 0);
    backend_->in_forked_worker();
    _exit(worker_main(sock, *backend_, status));
  }
  close(sv[1]);
  auto w = std::make_unique<Worker>();
  w->pid = pid;
  w->sock = sv[0];
  w->current_launch = status;
  return w;
}

void WorkerPool::retire(Worker& w, bool kill_first) {
  if (w.sock >= 0) close(w.sock);  // an idle worker exits on EOF
  if (w.pid > 0 && w.zygote_child) {
    // The whole process group, in any case: nothing the job started outlives it. Its status is
    // not needed (a crash was reaped by wait_status already), so the zygote reaps it later.
    kill(-w.pid, SIGKILL);
    kill(w.pid, SIGKILL);
    try {
      Zygote::for_backend(backend_->name()).release(w.pid);
    } catch (const std::exception&) {
    }
    w.pid = -1;
  } else if (w.pid > 0) {
    if (kill_first) kill(w.pid, SIGKILL);
    wait_status(w);
  }
  if (w.current_launch) munmap(w.current_launch, kStatusPageBytes);
  w.sock = -1;
  w.pid = -1;
  w.current_launch = nullptr;
}

std::vector<pid_t> WorkerPool::pids() const {
  std::unique_lock<std::mutex> lock(mutex_);
  // Waits for replacements in progress, so the answer lists every slot's worker.
  idle_cv_.wait(lock, [&] {
    for (size_t i = 0; i < refill_.size(); ++i)
      if (refill_[i] || busy_[i]) return false;
    return true;
  });
  std::vector<pid_t> out;
  for (const auto& w : workers_)
    if (w) out.push_back(w->pid);
  return out;
}

void WorkerPool::wait_for_starts() const {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait(lock, [&] {
    for (size_t i = 0; i < refill_.size(); ++i)
      if (refill_[i]) return false;
    return true;
  });
}

/// One job's exchange with its worker (WorkerPool::run's steps): what was sent, how the wait for
/// the reply ended, and what the parent counted on the way.
struct WorkerPool::Exchange {
  double timeout_s = 0;        ///< the job's time limit (s): CPU or wall (PoolOptions::cpu_time_limit)
  Clock::time_point start;     ///< when the job was sent
  double cpu_at_send = -1;     ///< the worker's CPU time (ms) when its job's limits started counting
  double main_at_send = -1;    ///< ... and its main thread's alone (ms)
  WatchLimits lim;             ///< what is watched while the parent waits
  Watched watched;             ///< how the last wait ended
  std::string reply;           ///< the reply frame, when watched.r == Recv::ok
  int reported_runs = 0;       ///< runs the worker reported one by one (parent_snapshots)
  int64_t copies = 0;          ///< output tensors the parent copied out of the job (copy_snapshot)
  int most_runs = 0;           ///< the most runs the job allows
  bool out_of_order_run = false;  ///< it reported a run out of order, or too many
};

size_t WorkerPool::acquire_slot() {
  size_t slot = 0;
  const auto wait_start = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  // A ready worker first; else a slot that no replacement is pending for (started by the caller).
  idle_cv_.wait(lock, [&] {
    for (size_t i = 0; i < busy_.size(); ++i)
      if (!busy_[i] && workers_[i]) return slot = i, true;
    for (size_t i = 0; i < busy_.size(); ++i)
      if (!busy_[i] && !refill_[i]) return slot = i, true;
    return false;
  });
  busy_[slot] = true;
  std::lock_guard<std::mutex> slock(stats_mutex_);
  stats_.wait_s += std::chrono::duration<double>(Clock::now() - wait_start).count();
  return slot;
}

void WorkerPool::release_slot(size_t slot, std::unique_ptr<Worker> w, bool refill) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!w && refill && !spares_.empty()) {  // a ready spare takes the retired worker's place
    w = std::move(spares_.front());
    spares_.pop_front();
  }
  workers_[slot] = std::move(w);
  busy_[slot] = false;
  refill_[slot] = refill && !workers_[slot];
  idle_cv_.notify_all();
  refill_cv_.notify_one();  // a slot to fill, or a spare to replace
}

std::unique_ptr<WorkerPool::Worker> WorkerPool::checkout(size_t slot) {
  std::unique_ptr<Worker> w;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    w = std::move(workers_[slot]);
  }
  try {
    if (!w) w = spawn();
    check_ready(*w);
  } catch (...) {
    release_slot(slot, nullptr);
    throw;
  }
  return w;
}

void WorkerPool::send_job(size_t slot, std::unique_ptr<Worker>& w, const Artifact& artifact, const BoundPlan& plan,
                          SharedBuffers& buffers, const RunRequest& request, Exchange& x) {
  const std::string body = encode_job(artifact, plan, request, buffers.layout());
  // The artifact travels as an open file: a sandboxed worker sees no host path.
  std::vector<int> attach{buffers.fd()};
  int art_fd = -1;
  if (w->zygote_child && !request.reference && !request.noop && !artifact.path.empty()) {
    art_fd = open(artifact.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (art_fd >= 0) attach.push_back(art_fd);
  }
  struct CloseFd {
    int fd;
    ~CloseFd() {
      if (fd >= 0) close(fd);
    }
  } close_art{art_fd};

  // A worker that died while idle (killed from outside) is replaced once before blaming the code.
  x.start = Clock::now();
  x.cpu_at_send = process_cpu_ms(w->pid);
  w->current_launch->store(-1);
  memory_flag_of(w->current_launch)->store(0);
  buffers.sent_to(w->pid);  // not recycled while this worker lives (env/shared_buffers.hpp)
  if (send_frame(w->sock, body, attach)) return;
  retire(*w, true);
  ++replacements_;
  try {
    w = spawn();
    check_ready(*w);
  } catch (...) {
    release_slot(slot, nullptr);
    throw;
  }
  x.cpu_at_send = process_cpu_ms(w->pid);
  buffers.sent_to(w->pid);
  if (!send_frame(w->sock, body, attach)) {
    retire(*w, true);
    release_slot(slot, nullptr);
    throw Error("cannot send a job to a fresh worker process");
  }
}

// Phase 1: the worker maps the job's memory (populated: every page of the tensors, the rotated
// sets and the snapshots) and says so before it loads any code of the answer. The job's CPU time
// is counted from the "go" that follows, so what mapping costs (it grows with the snapshots and
// scratch buffers, and varies from job to job) is in neither the candidate's job nor the no-op's,
// and the CPU-time bound compares the runs alone (docs/env.md "Timing"). Then the reply; a job
// whose checked runs the worker does not know reports each run first: the parent copies that
// run's outputs if it is checked, counts it, and lets the worker go on.
void WorkerPool::await_reply(Worker& w, const BoundPlan& plan, SharedBuffers& buffers, const RunRequest& request,
                             Exchange& x) {
  x.lim.limit_s = x.timeout_s;
  x.lim.cpu_time = options_.cpu_time_limit;
  x.lim.memory_limit = memory_limit_mb_ << 20;
  x.lim.max_threads = options_.sandbox.max_threads;
  x.lim.tensor_bytes = static_cast<int64_t>(buffers.layout().total_bytes);
  x.lim.idle_limit = options_.cpu_time_limit && !request.reference;  // (the reference's start reads files)
  x.most_runs = max_job_runs(request, request.rotations.size());
  x.watched = await_frame(w.pid, w.sock, x.reply, x.lim);
  if (x.watched.r != Recv::ok || x.reply != kMappedFrame) return;
  x.reply.clear();
  x.cpu_at_send = process_cpu_ms(w.pid);
  x.main_at_send = main_thread_cpu_ms(w.pid);
  WatchStart watch_start = WatchStart::now(w.pid, x.lim);  // the job's limits count from its "go"
  const char go = 'g';
  if (!send_all(w.sock, &go, 1)) {
    x.watched.r = Recv::eof;
    return;
  }
  x.watched = await_frame(w.pid, w.sock, x.reply, x.lim, watch_start);
  while (request.reports_runs() && x.watched.r == Recv::ok && x.reply.rfind("{\"ran\":", 0) == 0) {
    const auto parent_from = Clock::now();  // the worker waits for the parent's copies: not its idling
    int t = -1;
    try {
      if (check_reply_shape(x.reply).empty()) t = json::parse(x.reply).at("ran").get<int>();
    } catch (const std::exception&) {
    }
    if (t != next_reported_run(request, x.reported_runs) || t >= x.most_runs) {
      x.watched.r = Recv::error;  // not the next run (or block), or more than the job allows: refused below
      x.out_of_order_run = true;
      return;
    }
    if (request.parent_snapshots)
      for (int run = x.reported_runs; run <= t; ++run) x.copies += copy_snapshot(request, plan, buffers, run);
    if (request.parent_zeroes_scratch && !request.noop) zero_scratch(plan, buffers);  // (a no-op never writes it)
    x.reported_runs = t + 1;
    x.reply.clear();
    watch_start.excused_s += std::chrono::duration<double>(Clock::now() - parent_from).count();
    if (request.timeout_per_run) {  // the next run's own limit; the idle allowance is the job's
      const double carried = watch_start.idle_before_s + idle_since(w.pid, watch_start, x.lim);
      watch_start = WatchStart::now(w.pid, x.lim);
      watch_start.idle_before_s = carried;
    }
    if (!send_all(w.sock, &go, 1)) {
      x.watched.r = Recv::eof;
      return;
    }
    x.watched = await_frame(w.pid, w.sock, x.reply, x.lim, watch_start);
  }
}

// The reply frame is untrusted: the answer's code shares the worker's process and may have
// written it. Returns true when the worker must be retired.
bool WorkerPool::decode_checked_reply(const BoundPlan& plan, const RunRequest& request, const Exchange& x,
                                      double cpu_at_reply, RunOutcome& out) {
  try {
    const WorkerReply decoded = decode_reply(x.reply);
    out = decoded.outcome;
    std::string why = check_reply(out, request, plan.launches.size(), backend_->worker_verdicts());
    if (why.empty() && request.reports_runs() && out.runs.size() != static_cast<size_t>(x.reported_runs))
      why = "it lists " + std::to_string(out.runs.size()) + " runs; the worker reported " +
            std::to_string(x.reported_runs) + " runs as it made them";
    if (!why.empty()) {
      out = RunOutcome{};
      out.verdict = Verdict::runtime_error;
      out.message = "the worker's reply was refused: " + why + " (code must not write to the environment's job socket)";
      return true;
    }
    if (x.cpu_at_send >= 0 && cpu_at_reply >= x.cpu_at_send) out.job_cpu_ms = cpu_at_reply - x.cpu_at_send;
    return decoded.exiting;  // retired now, never handed another job
  } catch (const std::exception& e) {
    out.verdict = Verdict::runtime_error;
    out.message = std::string("the worker's reply was garbled: ") + e.what();
    return true;
  }
}

// No reply: the worker broke a limit, stalled, or died. Kills it where it still runs; the
// verdict names what happened and the launch that was running.
RunOutcome WorkerPool::failed_job_outcome(Worker& w, const BoundPlan& plan, const RunRequest& request,
                                          const Exchange& x) {
  RunOutcome out;
  out.verdict = Verdict::runtime_error;
  const Watched& watched = x.watched;
  const Recv r = watched.r;
  const int running = w.current_launch->load();
  auto kill_group = [&] {
    kill(-w.pid, SIGKILL);
    kill(w.pid, SIGKILL);
  };
  if (x.out_of_order_run) {
    kill_group();
    out.message = "the worker's reply was refused: after run " + std::to_string(x.reported_runs - 1) +
                  " it reported a run out of order or past the job's " + std::to_string(x.most_runs) +
                  " runs (code must not write to the environment's job socket)";
  } else if (r == Recv::timeout && watched.stalled) {
    kill_group();
    out.message = "the worker's reply stopped after " + std::to_string(watched.bytes_read) + " of " +
                  (watched.length ? std::to_string(watched.length + 8) : std::string("at least 8")) +
                  " bytes and was refused (code must not write to the environment's job socket)";
  } else if (r == Recv::timeout && watched.threads > 0) {
    kill_group();
    out.failed_launch = running;
    out.message = "the code started " + std::to_string(watched.threads) + " threads, more than the worker's limit of " +
                  std::to_string(options_.sandbox.max_threads) + ", and was stopped" + launch_text(plan, running);
  } else if (r == Recv::timeout && watched.over_memory) {
    kill_group();
    out.failed_launch = running;
    out.message = "the code used more than " + std::to_string(memory_limit_mb_) +
                  " MB of memory beyond its tensors (the worker's limit, env.worker_memory_mb) and was stopped" +
                  launch_text(plan, running);
  } else if (r == Recv::timeout) {
    kill(w.pid, SIGKILL);
    out.verdict = Verdict::timeout;
    out.failed_launch = running;
    auto g = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", v);
      return std::string(b);
    };
    const double t = x.timeout_s;
    if (watched.idle_s > 0) {
      kill_group();
      out.message = std::string(request.reference ? "the reference" : "the launch sequence") + " spent " +
                    g(std::round(watched.idle_s)) + " s neither computing nor waiting for a CPU (asleep or " +
                    "blocked: cpu code has nothing to wait for) and was stopped" +
                    (running >= 0 ? "; it was still running" + launch_text(plan, running) : std::string());
      return out;
    }
    const std::string secs = !options_.cpu_time_limit ? g(t) + " s"
                             : watched.cpu_limited    ? g(t) + " s of CPU time"
                                                      : g(std::max(3 * t, t + 30)) +
                                                 " s of wall time (it was not computing: sleeping or blocked?)";
    const int runs = std::clamp(request.timeout_runs, 1, kMaxTimeoutRuns);
    const std::string per_run = runs > 1 ? " (" + std::to_string(runs) + " runs of env.run_timeout_s " +
                                               g(options_.run_timeout_s) + " s: the fewest runs this job makes)"
                                         : std::string();
    out.message = std::string(request.reference ? "the reference" : "the launch sequence") + " did not finish within " +
                  secs + per_run + (running >= 0 ? "; it was still running" + launch_text(plan, running) : std::string()) +
                  " (an infinite loop or far too much work)";
  } else {
    close(w.sock);
    w.sock = -1;
    const int st = wait_status(w);
    out.failed_launch = running;
    // A worker that is pid 1 of its own pid namespace notes a signal it sent itself and exits
    // with 128 + it (env/job_frame.hpp fatal_signal_of): reported as the crash it stands for.
    const int noted = w.current_launch ? fatal_signal_of(w.current_launch)->load() : 0;
    const bool noted_crash = WIFEXITED(st) && noted > 0 && noted < NSIG && WEXITSTATUS(st) == 128 + noted;
    if (WIFSIGNALED(st) || noted_crash) {
      out.message = "the code crashed with " + signal_text(noted_crash ? noted : WTERMSIG(st)) + launch_text(plan, running);
      if (memory_flag_of(w.current_launch)->load() != 0)
        out.message += ", after its memory ran out: an allocation past the worker's memory limit of " +
                       std::to_string(memory_limit_mb_) + " MB beyond its tensors (env.worker_memory_mb) returned NULL";
    } else if (WIFEXITED(st)) {
      out.message = "the process exited with status " + std::to_string(WEXITSTATUS(st)) + launch_text(plan, running) +
                    " (the code must not call exit)";
    } else {
      out.message = "the worker process was lost" + launch_text(plan, running);
    }
  }
  return out;
}

RunOutcome WorkerPool::run(const Artifact& artifact, const BoundPlan& plan, SharedBuffers& buffers,
                           const RunRequest& request) {
  if (request.timeout_per_run && (!request.parent_snapshots || request.report_every != 1))
    throw Error("internal: a time limit per run needs the runs reported one by one (parent_snapshots)");
  if (request.parent_zeroes_scratch && request.report_every != 1)
    throw Error("internal: the parent zero-fills the scratch after every run: the runs must be reported one by one");
  if (request.parent_snapshots && request.report_every > 1 &&
      (fixed_job_runs(request) < 0 || request.rotations.size() < static_cast<size_t>(request.report_every)))
    throw Error("internal: a job reported in blocks of " + std::to_string(request.report_every) +
                " runs needs a fixed schedule and a rotation (own outputs) for every run of a block");
  // 1. A worker: a ready one, or one started for this job.
  const size_t slot = acquire_slot();
  std::unique_ptr<Worker> w = checkout(slot);
  // 2. The job. A reference job may be the first LibTorch CUDA work of its worker (library
  // start-up, cuBLAS handle, TorchScript compile): it gets kReferenceStartupS more than a
  // candidate's job.
  Exchange x;
  const double base_timeout_s =
      options_.run_timeout_s * std::clamp(request.timeout_runs, 1, kMaxTimeoutRuns);  // several slow runs
  x.timeout_s = options_.run_timeout_s > 0 && request.reference ? base_timeout_s + kReferenceStartupS : base_timeout_s;
  send_job(slot, w, artifact, plan, buffers, request, x);
  // 3. The reply, watched (CPU, wall time, memory, threads).
  await_reply(*w, plan, buffers, request, x);
  // The job's CPU time, read from outside: whatever the code does to the worker's own clocks, it
  // cannot hide the CPU it used (the verifier compares it with the reported times).
  const double cpu_at_reply = x.watched.r == Recv::ok ? process_cpu_ms(w->pid) : -1;
  const double main_at_reply = x.watched.r == Recv::ok ? main_thread_cpu_ms(w->pid) : -1;
  {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    ++stats_.jobs;
    stats_.snapshot_copies += x.copies;
    stats_.job_s += std::chrono::duration<double>(Clock::now() - x.start).count();
  }
  // 4. The outcome: the checked reply, or what stopped the worker.
  RunOutcome out;
  bool dead = true;
  if (x.watched.r == Recv::ok)
  {
    dead = decode_checked_reply(plan, request, x, cpu_at_reply, out);
    if (out.job_cpu_ms >= 0 && x.main_at_send >= 0 && main_at_reply >= x.main_at_send)
      out.job_main_cpu_ms = std::min(out.job_cpu_ms, main_at_reply - x.main_at_send);
  } else
    out = failed_job_outcome(*w, plan, request, x);
  out.runs_counted = request.reports_runs() ? x.reported_runs : -1;
  // 5. The worker back to its slot, or retired and replaced in the background (the caller goes
  // on at once). A no-op job ran no code of an answer (RunRequest::noop): its worker serves on,
  // as fresh as it was (a cpu evaluation's no-op jobs were 2 of its 4.6 worker processes).
  if (!request.noop) ++w->jobs;
  const bool spent = !request.noop && (backend_->worker_serves_one_job() ||
                                       (options_.max_jobs_per_worker > 0 && w->jobs >= options_.max_jobs_per_worker));
  if (dead || spent) {
    retire(*w, true);
    ++replacements_;
    w.reset();
    release_slot(slot, nullptr, true);
    return out;
  }
  release_slot(slot, std::move(w));
  return out;
}

}  // namespace leap::env
