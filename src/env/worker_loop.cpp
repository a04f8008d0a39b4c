// The worker's side of the job socket (env/worker_pool.hpp worker_main, env/worker_process.hpp
// worker_process_main): sandbox, then serve jobs: map the job's memory, say so, wait for "go",
// run it on the backend, reply.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "env/job_frame.hpp"
#include "env/timing_schedule.hpp"
#include "env/worker_backend.hpp"
#include "env/worker_job.hpp"
#include "env/worker_pool.hpp"
#include "env/worker_process.hpp"
#include "util/error.hpp"

namespace leap::env {

using json = nlohmann::json;

namespace {

// Address-space size of this process, bytes (0 if /proc cannot be read).
int64_t own_vm_bytes() {
  std::ifstream in("/proc/self/statm");
  long long pages = 0;
  if (!(in >> pages)) return 0;
  return static_cast<int64_t>(pages) * sysconf(_SC_PAGESIZE);
}

// Copies the artifact open as `fd` for a worker that sees no host path: into the module file
// whose write descriptor `*module_fd` the sandbox kept (closed after the copy: nothing can write
// that file again), else into the scratch folder.
std::string copy_artifact(int fd, int job, int* module_fd) {
  std::string path = "/tmp/leap-module-" + std::to_string(job) + ".so";
  int out = -1;
  if (*module_fd >= 0) {
    path = ChildSandbox::kModulePath;
    out = *module_fd;
    *module_fd = -1;
  } else {
    out = open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0700);
  }
  if (out < 0) throw Error("worker: cannot write " + path + ": " + std::strerror(errno));
  char buf[1 << 16];
  off_t off = 0;
  for (;;) {
    ssize_t n = pread(fd, buf, sizeof buf, off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(out);
      throw Error(std::string("worker: cannot read the artifact: ") + std::strerror(errno));
    }
    if (n == 0) break;
    if (write(out, buf, static_cast<size_t>(n)) != n) {
      close(out);
      throw Error("worker: cannot write " + path + ": " + std::strerror(errno));
    }
    off += n;
  }
  close(out);
  return path;
}

std::string mb_text(int64_t bytes) { return std::to_string(bytes >> 20) + " MB"; }

std::atomic<int>* g_memory_flag = nullptr;
std::atomic<int>* g_fatal_signal = nullptr;
bool g_pid_one = false;

// On a fatal signal: is there room for 64 MB more? If not, the crash most likely followed a failed
// allocation; say so on the status page. Then die of the same signal (SA_RESETHAND): a fault
// recurs when the handler returns. A worker that is pid 1 of its own pid namespace cannot die of
// a signal it sent itself (abort()'s SIGABRT, a raise()): the kernel drops it, so that signal is
// noted on the status page and the worker exits with 128 + the signal.
void on_fatal_signal(int sig, siginfo_t* info, void*) {
  if (g_memory_flag) {
    void* p = mmap(nullptr, size_t(64) << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      g_memory_flag->store(1);
    else
      munmap(p, size_t(64) << 20);
  }
  if (info && info->si_code <= 0) {  // sent by a process (SI_USER, SI_TKILL, SI_QUEUE), not a fault
    if (!g_pid_one) raise(sig);        // SIG_DFL again: it ends the process
    if (g_fatal_signal) g_fatal_signal->store(sig);
    _exit(128 + sig);
  }
}

void install_fatal_signal_handlers(std::atomic<int>* flag, std::atomic<int>* fatal, bool pid_one) {
  g_memory_flag = flag;
  g_fatal_signal = fatal;
  g_pid_one = pid_one;
  static char altstack[1 << 16];
  stack_t ss{};
  ss.ss_sp = altstack;
  ss.ss_size = sizeof altstack;
  sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_sigaction = on_fatal_signal;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) sigaction(sig, &sa, nullptr);
}

}  // namespace

int worker_main(int sock, Backend& backend, std::atomic<int>* current_launch, const WorkerContext& ctx) {
  const bool pid_one = getpid() == 1;  // pid 1 of its own pid namespace (cpu workers)
  if (current_launch && (ctx.memory_limit_bytes > 0 || pid_one))
    install_fatal_signal_handlers(ctx.memory_limit_bytes > 0 ? memory_flag_of(current_launch) : nullptr,
                                  fatal_signal_of(current_launch), pid_one);
  std::pair<void*, size_t> stale{MAP_FAILED, 0};  // the last job's tensors, unmapped at the next job
  int module_fd = ctx.module_fd;                  // the module file's one write descriptor, until the first copy
  for (int job_no = 0;; ++job_no) {
    std::string body;
    std::vector<int> fds;
    Recv r = recv_frame(sock, body, false, {}, &fds);
    if (r != Recv::ok) return 0;  // parent closed the socket
    if (stale.first != MAP_FAILED) munmap(stale.first, stale.second);
    stale = {MAP_FAILED, 0};
    RunOutcome out;
    void* base = MAP_FAILED;
    size_t total = 0;
    std::string scratch_copy;
    try {
      WorkerJob job = decode_job(body);
      Artifact& art = job.artifact;
      const BoundPlan& plan = job.plan;
      RunRequest& req = job.request;
      if (req.reports_runs())  // runs reported (each, or each block's last), the parent's "go" awaited: it copies (or zero-fills the scratch) meanwhile
        req.on_run_done = [sock, &req](int run) {
          if (!reports_after_run(req, run)) return true;
          return send_frame(sock, "{\"ran\":" + std::to_string(run) + "}") && await_go(sock);
        };
      total = job.total_bytes;
      const std::vector<size_t>& offsets = job.offsets;
      if (fds.empty()) throw Error("no tensor memory was passed to the worker");
      // Populated at once (the parent wrote every page): a job's page faults, counted in its CPU
      // time, were most of what a run costs besides the code (54 -> 38 us a run, relu's 64-KB
      // snapshots), and the CPU-time bound allows a share of that (env/cpu_time_bound.hpp kCpuNoiseFraction).
      base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fds[0], 0);
      if (base == MAP_FAILED) throw Error(std::string("worker mmap: ") + std::strerror(errno));
      close(fds[0]);  // mapped: the code need not find the memfd among its fds
      fds[0] = -1;
      for (const auto& [offset, bytes] : job.guards) mprotect(static_cast<char*>(base) + offset, bytes, PROT_NONE);
      std::vector<void*> ptrs;
      for (size_t off : offsets) ptrs.push_back(static_cast<char*>(base) + off);
      if (ctx.copy_artifact && !req.reference && fds.size() > 1) {
        scratch_copy = copy_artifact(fds[1], job_no, &module_fd);
        art.path = scratch_copy;
      }
      for (size_t k = 1; k < fds.size(); ++k) close(fds[k]);
      fds.resize(1);
      // Memory: this process's size now (its code, its tensors) plus the limit, plus room for
      // thread stacks and malloc arenas (reserved address space, not memory); the pool watches
      // the resident memory against the limit itself. Not for a no-op job (no code of an
      // answer): a hard limit set now could not be raised for the next job, whose tensors may
      // be larger.
      if (ctx.memory_limit_bytes > 0 && !req.noop) {
        const int64_t now = std::max(own_vm_bytes(), ctx.base_vm_bytes + static_cast<int64_t>(total));
        const rlim_t want = static_cast<rlim_t>(now + ctx.memory_limit_bytes + ctx.memory_limit_bytes / 4 + (int64_t(1) << 30));
        rlimit cur{};
        getrlimit(RLIMIT_AS, &cur);
        if (cur.rlim_max == RLIM_INFINITY || want <= cur.rlim_max) {
          rlimit lim{want, want};
          setrlimit(RLIMIT_AS, &lim);
        }
      }
      // Mapped, and no code of the answer loaded yet: say so, and wait for the parent's "go" (it
      // counts the job's CPU time from there).
      if (!send_frame(sock, kMappedFrame)) return 1;
      if (!await_go(sock)) return 0;  // the parent gave up on this job
      out = req.reference ? backend.time_reference(*req.reference, plan, ptrs, req)
                          : backend.execute(art, plan, ptrs, req, current_launch);
    } catch (const std::bad_alloc&) {
      out.verdict = Verdict::runtime_error;
      out.message = "worker: out of memory";
    } catch (const std::exception& e) {
      out.verdict = Verdict::runtime_error;
      out.message = std::string("worker error: ") + e.what();
    }
    if (ctx.memory_limit_bytes > 0 && out.verdict == Verdict::runtime_error &&
        out.message.find("bad_alloc") != std::string::npos)
      out.message += " (an allocation failed: the worker's memory limit is " + mb_text(ctx.memory_limit_bytes) +
                     " beyond its tensors, env.worker_memory_mb)";
    for (int fd : fds)
      if (fd >= 0) close(fd);
    if (!scratch_copy.empty()) unlink(scratch_copy.c_str());
    // A worker that will exit after this reply (e.g. a poisoned CUDA context) says so in the
    // reply, so the pool retires it before another job can be sent to the dying process.
    const bool exiting = backend.worker_must_exit();
    if (!send_frame(sock, encode_reply(out, exiting))) return 1;
    // Unmapped after the reply, so the parent's reading of this job's CPU time (at the reply)
    // does not include it; a worker that serves another job unmaps before that job's "mapped".
    stale = {base, total};
    if (exiting) {
      // Idle until the pool closes the socket (or kills us), so the CPU time it reads after the
      // reply is the job's alone, not the start of this process's exit.
      char c;
      while (read(sock, &c, 1) > 0) {
      }
      return 0;
    }
  }
}

int worker_process_main(const std::string& spec_json, int sock, int status_fd, const HostIsolation& host) {
  std::atomic<int>* status = nullptr;
  void* page = mmap(nullptr, kStatusPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, status_fd, 0);
  close(status_fd);
  if (page != MAP_FAILED) status = static_cast<std::atomic<int>*>(page);
  json spec;
  std::unique_ptr<Backend> backend;
  json ready;
  try {
    spec = json::parse(spec_json);
    backend = make_worker_backend(spec.at("backend").dump());
  } catch (const std::exception& e) {
    send_frame(sock, json{{"ok", false}, {"error", std::string("worker setup: ") + e.what()}}.dump());
    return 3;
  }
  const SandboxMode mode = sandbox_mode_from_string(spec.at("mode").get<std::string>());
  const std::string fs = spec.at("fs").get<std::string>();
  WorkerContext ctx;
  ctx.base_vm_bytes = own_vm_bytes();
  ctx.memory_limit_bytes = spec.at("memory_mb").get<int64_t>() << 20;
  AppliedSandbox applied;
  if (mode != SandboxMode::off) {
    ChildSandbox cs;
    cs.fs = fs == "minimal" ? ChildSandbox::Fs::minimal : fs == "host_readonly" ? ChildSandbox::Fs::host_readonly
                                                                                : ChildSandbox::Fs::none;
    cs.no_processes = true;
    cs.no_unix_connect = fs == "minimal";  // cpu workers; cuda drivers may use unix sockets
    cs.libraries_only = fs == "minimal";   // cpu workers: loaded already, no /usr for the answer
    cs.drop_privileges = spec.at("drop_privileges").get<bool>();
    cs.scratch_mb = spec.at("scratch_mb").get<int64_t>();
    cs.file_size_mb = spec.at("file_size_mb").get<int64_t>();
    cs.open_files = spec.at("open_files").get<int64_t>();
    applied = enter_child_sandbox(cs, host);
    // Both file systems mount a fresh scratch tmpfs on /tmp, where a host path of the compile
    // cache (relative, or under /tmp) is not seen: the module is copied from the fd the job passes.
    ctx.copy_artifact = applied.filesystem;
    ctx.module_fd = applied.module_fd;
  } else {
    rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
  }
  if (applied.filesystem) {
    if (chdir("/tmp") != 0) applied.failed.push_back("chdir /tmp");
  }
  if (mode != SandboxMode::off && fs == "minimal") clearenv();  // a cpu worker needs none (not even PATH)
  const bool ok = mode != SandboxMode::strict || applied.failed.empty();
  std::string failed;
  for (const auto& f : applied.failed) failed += (failed.empty() ? "" : "; ") + f;
  if (!send_frame(sock, json{{"ok", ok}, {"error", failed}}.dump())) return 1;
  if (!ok) return 3;
  return worker_main(sock, *backend, status, ctx);
}

}  // namespace leap::env
