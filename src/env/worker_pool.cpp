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
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace leap::env {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

// ---- framing: 8-byte length, then the JSON text; an fd may ride on the first byte ----------

bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool send_frame(int sock, const std::string& body, int attach_fd = -1) {
  uint64_t len = body.size();
  iovec iov{&len, sizeof len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
  if (attach_fd >= 0) {
    std::memset(ctrl, 0, sizeof ctrl);
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &attach_fd, sizeof(int));
  }
  ssize_t w;
  do {
    w = sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (w < 0 && errno == EINTR);
  if (w < 0) return false;
  if (static_cast<size_t>(w) < sizeof len &&
      !send_all(sock, reinterpret_cast<const char*>(&len) + w, sizeof len - static_cast<size_t>(w)))
    return false;
  return send_all(sock, body.data(), body.size());
}

enum class Recv { ok, eof, timeout, error };

// Waits for readability until `deadline` (none if `timed` is false).
Recv wait_readable(int sock, bool timed, Clock::time_point deadline) {
  for (;;) {
    int ms = -1;
    if (timed) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return Recv::timeout;
      ms = static_cast<int>(std::min<long long>(left, 1 << 30));
    }
    pollfd p{sock, POLLIN, 0};
    int r = poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Recv::error;
    if (r == 0) continue;  // re-check the deadline
    return Recv::ok;       // readable, or hung up (recv will return 0)
  }
}

// CPU time (user + system, all threads) process `pid` has used, seconds; 0 if it cannot be read.
double process_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return 0.0;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {  // field 3 is the state; 14 utime, 15 stime
    if (i == 14) utime = std::stoull(f);
    if (i == 15) stime = std::stoull(f);
  }
  static const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  return static_cast<double>(utime + stime) / ticks;
}

Recv recv_exact(int sock, char* p, size_t n, bool timed, Clock::time_point deadline, int* fd_out) {
  while (n > 0) {
    Recv w = wait_readable(sock, timed, deadline);
    if (w != Recv::ok) return w;
    iovec iov{p, n};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int))];
    if (fd_out) {
      msg.msg_control = ctrl;
      msg.msg_controllen = sizeof ctrl;
    }
    ssize_t r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Recv::error;
    }
    if (r == 0) return Recv::eof;
    if (fd_out) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(fd_out, CMSG_DATA(c), sizeof(int));
      fd_out = nullptr;  // only the first chunk carries it
    }
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Recv::ok;
}

Recv recv_frame(int sock, std::string& body, bool timed, Clock::time_point deadline, int* fd_out = nullptr) {
  uint64_t len = 0;
  Recv r = recv_exact(sock, reinterpret_cast<char*>(&len), sizeof len, timed, deadline, fd_out);
  if (r != Recv::ok) return r;
  if (len > (uint64_t(1) << 30)) return Recv::error;
  body.resize(len);
  return recv_exact(sock, body.data(), len, timed, deadline, nullptr);
}

// ---- job (de)serialisation ------------------------------------------------------------------

json plan_to_json(const BoundPlan& plan) {
  json t = json::array();
  for (const auto& x : plan.tensors)
    t.push_back({{"name", x.name}, {"dtype", std::string(to_string(x.dtype))}, {"shape", x.shape},
                 {"role", static_cast<int>(x.role)}});
  json l = json::array();
  for (const auto& x : plan.launches) {
    json args = json::array();
    for (const auto& a : x.args)
      args.push_back({{"k", static_cast<int>(a.kind)}, {"t", a.tensor}, {"i", a.i}, {"f", a.f}});
    l.push_back({{"kernel", x.kernel}, {"grid", x.grid}, {"block", x.block},
                 {"shared_bytes", x.shared_bytes}, {"signature", x.signature}, {"args", args}});
  }
  return {{"tensors", t}, {"launches", l}};
}

BoundPlan plan_from_json(const json& j) {
  BoundPlan plan;
  for (const auto& x : j.at("tensors")) {
    BoundTensor t;
    t.name = x.at("name").get<std::string>();
    dtype_from_string(x.at("dtype").get<std::string>(), t.dtype);
    t.shape = x.at("shape").get<std::vector<int64_t>>();
    t.role = static_cast<TensorRole>(x.at("role").get<int>());
    plan.tensors.push_back(std::move(t));
  }
  for (const auto& x : j.at("launches")) {
    BoundLaunch l;
    l.kernel = x.at("kernel").get<std::string>();
    l.grid = x.at("grid").get<std::array<int64_t, 3>>();
    l.block = x.at("block").get<std::array<int64_t, 3>>();
    l.shared_bytes = x.at("shared_bytes").get<int64_t>();
    l.signature = x.at("signature").get<std::string>();
    for (const auto& a : x.at("args")) {
      BoundArg b;
      b.kind = static_cast<ArgKind>(a.at("k").get<int>());
      b.tensor = a.at("t").get<int>();
      b.i = a.at("i").get<int64_t>();
      b.f = a.at("f").is_number() ? a.at("f").get<double>() : std::nan("");
      l.args.push_back(b);
    }
    plan.launches.push_back(std::move(l));
  }
  return plan;
}

json outcome_to_json(const RunOutcome& o) {
  return {{"verdict", std::string(to_string(o.verdict))}, {"message", o.message},
          {"failed_launch", o.failed_launch}, {"times_ms", o.times_ms}};
}

RunOutcome outcome_from_json(const json& j) {
  RunOutcome o;
  o.verdict = verdict_from_string(j.at("verdict").get<std::string>());
  o.message = j.at("message").get<std::string>();
  o.failed_launch = j.at("failed_launch").get<int>();
  o.times_ms = j.at("times_ms").get<std::vector<double>>();
  return o;
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

// ---- worker side ----------------------------------------------------------------------------

int worker_main(int sock, Backend& backend, std::atomic<int>* current_launch) {
  for (;;) {
    std::string body;
    int fd = -1;
    Recv r = recv_frame(sock, body, false, {}, &fd);
    if (r != Recv::ok) return 0;  // parent closed the socket
    RunOutcome out;
    void* base = MAP_FAILED;
    size_t total = 0;
    try {
      json job = json::parse(body);
      Artifact art;
      art.backend = job.at("artifact").at("backend").get<std::string>();
      art.path = job.at("artifact").at("path").get<std::string>();
      art.key = job.at("artifact").at("key").get<std::string>();
      BoundPlan plan = plan_from_json(job.at("plan"));
      RunRequest req;
      req.warmup = job.at("warmup").get<int>();
      req.trials = job.at("trials").get<int>();
      req.max_seconds = job.at("max_seconds").get<double>();
      req.rotations = job.at("rotations").get<std::vector<std::vector<int>>>();
      if (job.contains("reference")) {
        const json& rj = job.at("reference");
        ReferenceProgram rp;
        rp.torchscript = rj.at("torchscript").get<std::string>();
        rp.file = rj.at("file").get<std::string>();
        rp.task_file = rj.at("task_file").get<std::string>();
        rp.inputs = rj.at("inputs").get<int>();
        req.reference = std::move(rp);
      }
      total = job.at("total_bytes").get<size_t>();
      auto offsets = job.at("offsets").get<std::vector<size_t>>();
      if (fd < 0) throw Error("no tensor memory was passed to the worker");
      base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) throw Error(std::string("worker mmap: ") + std::strerror(errno));
      for (const auto& g : job.at("guards"))
        mprotect(static_cast<char*>(base) + g.at(0).get<size_t>(), g.at(1).get<size_t>(), PROT_NONE);
      std::vector<void*> ptrs;
      for (size_t off : offsets) ptrs.push_back(static_cast<char*>(base) + off);
      out = req.reference ? backend.time_reference(*req.reference, plan, ptrs, req)
                          : backend.execute(art, plan, ptrs, req, current_launch);
    } catch (const std::exception& e) {
      out.verdict = Verdict::runtime_error;
      out.message = std::string("worker error: ") + e.what();
    }
    if (base != MAP_FAILED) munmap(base, total);
    if (fd >= 0) close(fd);
    if (!send_frame(sock, outcome_to_json(out).dump())) return 1;
    if (backend.worker_must_exit()) return 0;  // e.g. a poisoned CUDA context
  }
}

// ---- parent side ----------------------------------------------------------------------------

struct WorkerPool::Worker {
  pid_t pid = -1;
  int sock = -1;
  std::atomic<int>* current_launch = nullptr;  // in a shared page, written by the worker
  int jobs = 0;
};

WorkerPool::WorkerPool(std::shared_ptr<Backend> backend, PoolOptions options)
    : backend_(std::move(backend)), options_(options) {
  if (options_.workers < 1) options_.workers = 1;
  for (int i = 0; i < options_.workers; ++i) {
    workers_.push_back(spawn());
    busy_.push_back(false);
  }
}

WorkerPool::~WorkerPool() {
  for (auto& w : workers_)
    if (w) retire(*w, true);
}

namespace {

/// One process-wide thread that does every fork. PR_SET_PDEATHSIG fires when the *thread* that
/// forked a child exits, not the process: a worker forked from a short-lived caller thread (a
/// grading thread that calls run() and replaces a retired worker) would be SIGKILLed when that
/// thread ends, possibly in the middle of another thread's job. This thread never exits.
class Forker {
 public:
  static Forker& get() {
    static Forker* f = new Forker();  // never destroyed: the thread lives until the process ends
    return *f;
  }
  template <class F>
  auto run(F fn) -> decltype(fn()) {
    auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::move(fn));
    auto fut = task->get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return fut.get();
  }

 private:
  Forker() { std::thread([this] { loop(); }).detach(); }
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
};

}  // namespace

std::unique_ptr<WorkerPool::Worker> WorkerPool::spawn() {
  return Forker::get().run([this] { return spawn_worker_process(); });
}

std::unique_ptr<WorkerPool::Worker> WorkerPool::spawn_worker_process() {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error(std::string("worker socketpair: ") + std::strerror(errno));
  void* page = mmap(nullptr, sizeof(std::atomic<int>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    close(sv[0]);
    close(sv[1]);
    throw Error(std::string("worker status mmap: ") + std::strerror(errno));
  }
  auto* status = new (page) std::atomic<int>(-1);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    int e = errno;
    close(sv[0]);
    close(sv[1]);
    munmap(page, sizeof(std::atomic<int>));
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
  if (w.pid > 0) {
    if (kill_first) kill(w.pid, SIGKILL);
    int st = 0;
    reap(w.pid, &st);
  }
  if (w.current_launch) munmap(w.current_launch, sizeof(std::atomic<int>));
  w.sock = -1;
  w.pid = -1;
  w.current_launch = nullptr;
}

std::vector<pid_t> WorkerPool::pids() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<pid_t> out;
  for (const auto& w : workers_)
    if (w) out.push_back(w->pid);
  return out;
}

RunOutcome WorkerPool::run(const Artifact& artifact, const BoundPlan& plan, SharedBuffers& buffers,
                           const RunRequest& request) {
  size_t slot = 0;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_cv_.wait(lock, [&] {
      for (size_t i = 0; i < busy_.size(); ++i)
        if (!busy_[i]) return slot = i, true;
      return false;
    });
    busy_[slot] = true;
  }
  // Returns the slot (with a live worker, or empty if none could be started) to the pool.
  auto release = [&](std::unique_ptr<Worker> w) {
    std::lock_guard<std::mutex> lock(mutex_);
    workers_[slot] = std::move(w);
    busy_[slot] = false;
    idle_cv_.notify_one();
  };
  std::unique_ptr<Worker> w;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    w = std::move(workers_[slot]);
  }
  try {
    if (!w) w = spawn();
  } catch (...) {
    release(nullptr);
    throw;
  }

  const BufferLayout& layout = buffers.layout();
  json job = {{"artifact", {{"backend", artifact.backend}, {"path", artifact.path}, {"key", artifact.key}}},
              {"plan", plan_to_json(plan)},
              {"warmup", request.warmup},
              {"trials", request.trials},
              {"max_seconds", request.max_seconds},
              {"rotations", request.rotations},
              {"total_bytes", layout.total_bytes},
              {"offsets", layout.offsets},
              {"guards", layout.guards}};
  if (request.reference)
    job["reference"] = {{"torchscript", request.reference->torchscript},
                        {"file", request.reference->file},
                        {"task_file", request.reference->task_file},
                        {"inputs", request.reference->inputs}};
  const std::string body = job.dump();
  // A reference job may be the first LibTorch CUDA work of its worker (library start-up, cuBLAS
  // handle, TorchScript compile): it gets kReferenceStartupS more than a candidate's job.
  const double timeout_s = options_.run_timeout_s > 0 && request.reference ? options_.run_timeout_s + kReferenceStartupS
                                                                           : options_.run_timeout_s;

  // A worker that died while idle (killed from outside) is replaced once before blaming the code.
  w->current_launch->store(-1);
  if (!send_frame(w->sock, body, buffers.fd())) {
    retire(*w, true);
    ++replacements_;
    try {
      w = spawn();
    } catch (...) {
      release(nullptr);
      throw;
    }
    if (!send_frame(w->sock, body, buffers.fd())) {
      retire(*w, true);
      release(nullptr);
      throw Error("cannot send a job to a fresh worker process");
    }
  }

  RunOutcome out;
  std::string reply;
  Recv r = Recv::ok;
  bool cpu_limited = false;  // the timeout, if any, was the CPU-time limit
  if (timeout_s > 0) {
    // Wait in slices of at most 50 ms, checking the limit between them.
    const auto start = Clock::now();
    auto after = [&](double s) {
      return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    };
    const double limit = timeout_s;
    const double wall_cap = options_.cpu_time_limit ? std::max(3 * limit, limit + 30) : limit;
    const double cpu0 = options_.cpu_time_limit ? process_cpu_seconds(w->pid) : 0.0;
    for (;;) {
      r = wait_readable(w->sock, true, std::min(Clock::now() + std::chrono::milliseconds(50), after(wall_cap)));
      if (r != Recv::timeout) break;
      if (Clock::now() >= after(wall_cap)) break;
      if (options_.cpu_time_limit && process_cpu_seconds(w->pid) - cpu0 >= limit) {
        cpu_limited = true;
        break;
      }
    }
    if (r == Recv::ok) r = recv_frame(w->sock, reply, true, Clock::now() + std::chrono::seconds(30));
  } else {
    r = recv_frame(w->sock, reply, false, Clock::now());
  }
  bool dead = false;
  if (r == Recv::ok) {
    try {
      out = outcome_from_json(json::parse(reply));
    } catch (const std::exception& e) {
      out.verdict = Verdict::runtime_error;
      out.message = std::string("the worker's reply was garbled: ") + e.what();
      dead = true;
    }
  } else if (r == Recv::timeout) {
    int running = w->current_launch->load();
    kill(w->pid, SIGKILL);
    out.verdict = Verdict::timeout;
    out.failed_launch = running;
    auto g = [](double v) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", v);
      return std::string(b);
    };
    const std::string secs = !options_.cpu_time_limit ? g(timeout_s) + " s"
                             : cpu_limited            ? g(timeout_s) + " s of CPU time"
                                                      : g(std::max(3 * timeout_s, timeout_s + 30)) +
                                                 " s of wall time (it was not computing: sleeping or blocked?)";
    out.message = std::string(request.reference ? "the reference" : "the launch sequence") + " did not finish within " + secs +
                  (running >= 0 ? "; it was still running" + launch_text(plan, running) : std::string()) +
                  " (an infinite loop or far too much work)";
    dead = true;
  } else {
    int running = w->current_launch->load();
    int st = 0;
    close(w->sock);
    w->sock = -1;
    reap(w->pid, &st);
    w->pid = -1;
    out.verdict = Verdict::runtime_error;
    out.failed_launch = running;
    if (WIFSIGNALED(st))
      out.message = "the code crashed with " + signal_text(WTERMSIG(st)) + launch_text(plan, running);
    else if (WIFEXITED(st))
      out.message = "the process exited with status " + std::to_string(WEXITSTATUS(st)) +
                    launch_text(plan, running) + " (the code must not call exit)";
    else
      out.message = "the worker process was lost" + launch_text(plan, running);
    dead = true;
  }
  ++w->jobs;
  if (dead || (options_.max_jobs_per_worker > 0 && w->jobs >= options_.max_jobs_per_worker)) {
    retire(*w, true);
    ++replacements_;
    w.reset();
    try {
      w = spawn();
    } catch (...) {
      // Left empty: the next run() on this slot tries again.
    }
  }
  release(std::move(w));
  return out;
}

}  // namespace leap::env
