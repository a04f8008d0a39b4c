#include "env/zygote.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "env/fd_socket.hpp"
#include "env/forker.hpp"
#include "env/sandbox_child.hpp"
#include "env/worker_process.hpp"
#include "util/error.hpp"
#include <spdlog/spdlog.h>
#if LEAP_HAVE_NVRTC
#include "env/cuda_driver.hpp"
#endif

extern char** environ;

namespace leap::env {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kMaxPacket = 1 << 20;
constexpr int kMaxFds = 4;

bool send_packet(int sock, const std::string& body, const std::vector<int>& fds) {
  return send_with_fds(sock, body.data(), body.size(), fds, kMaxFds) == static_cast<ssize_t>(body.size());
}

// Receives one packet; false on EOF, error or timeout (timeout_ms < 0: none).
bool recv_packet(int sock, std::string& body, std::vector<int>& fds, int timeout_ms) {
  if (timeout_ms >= 0 && wait_readable(sock, true, Clock::now() + std::chrono::milliseconds(timeout_ms)) != Readable::yes)
    return false;
  // Received into a buffer that is never zero-filled (only the packet's own pages are touched):
  // a 1-MiB resize of `body` per packet zero-filled 256 pages, and in the zygote each of them was
  // copied on write once a worker forked from it shared them (9% of the zygote's page faults,
  // 2026-12-07).
  std::unique_ptr<char[]> buffer(new char[kMaxPacket]);
  fds.clear();
  const ssize_t r = recv_with_fds(sock, buffer.get(), kMaxPacket, &fds, kMaxFds);
  if (r <= 0) return false;
  body.assign(buffer.get(), static_cast<size_t>(r));
  return true;
}

// Reads `fd` until EOF or `deadline`; false on timeout.
bool read_until_eof(int fd, std::string& out, size_t max_bytes, bool* truncated, Clock::time_point deadline,
                    bool timed) {
  char buf[8192];
  for (;;) {
    const Readable w = wait_readable(fd, timed, deadline);
    if (w == Readable::timeout) return false;
    if (w == Readable::error) return true;
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return true;
    const size_t room = out.size() < max_bytes ? max_bytes - out.size() : 0;
    if (static_cast<size_t>(n) > room && truncated) *truncated = true;
    out.append(buf, std::min(room, static_cast<size_t>(n)));
  }
}

// The environment the zygote (and so every sandboxed process) gets: nothing of the trainer's
// but what finding programs and the GPU needs.
std::vector<std::string> zygote_environment() {
  std::vector<std::string> out;
  static const char* keep[] = {"PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                               "NVIDIA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING", "LEAP_WORKER_EXE",
                               "LEAP_CPU_WORKER_EXE"};
  for (const char* k : keep)
    if (const char* v = std::getenv(k)) out.push_back(std::string(k) + "=" + v);
  if (!std::getenv("PATH")) out.push_back("PATH=/usr/local/bin:/usr/bin:/bin");
  out.push_back("LC_ALL=C");
  out.push_back("TMPDIR=/tmp");
  return out;
}

// ---- zygote side -------------------------------------------------------------------------------

void child_common() {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  setpgid(0, 0);
  for (int s = 1; s < NSIG; ++s)
    if (s != SIGKILL && s != SIGSTOP) signal(s, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

// The reply to a request that came with another number of descriptors than `op` takes.
json wrong_fd_count(const char* op, size_t want_fds) {
  return {{"error", std::string(op) + " request needs " + std::to_string(want_fds) + " fds"}};
}

// Forks a child of the zygote that runs `child` (which must not return) after child_common();
// the reply names its pid, or why there is none.
template <class F>
json fork_child(const char* op, const std::vector<int>& fds, size_t want_fds, F child) {
  if (fds.size() != want_fds) return wrong_fd_count(op, want_fds);
  pid_t pid = fork();
  if (pid < 0) return {{"error", std::string("fork: ") + std::strerror(errno)}};
  if (pid == 0) {
    child_common();
    child();
    _exit(1);
  }
  return {{"pid", pid}};
}

// Moves `fds` to 3, 4, ... (in order) and closes everything above them.
void place_fds(std::vector<int>& fds) {
  // First above every target, then down into place, so no dup2 clobbers a source.
  int high = 100;
  for (int& fd : fds) {
    int n = fcntl(fd, F_DUPFD, high);
    fd = n;
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    dup2(fds[i], 3 + static_cast<int>(i));
    fds[i] = 3 + static_cast<int>(i);
  }
  close_range(3 + static_cast<unsigned>(fds.size()), ~0U, 0);
}

void devnull_stdio(bool out_too) {
  int n = open("/dev/null", O_RDWR);
  if (n < 0) return;
  dup2(n, 0);
  if (out_too) {
    dup2(n, 1);
    dup2(n, 2);
  }
  if (n > 2) close(n);
}

void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t w = write(fd, s.data() + off, s.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

// Like fork_child, but the child is the first process (pid 1) of a pid namespace of its own, so
// no other process is visible to it by pid: one clone(CLONE_NEWPID) of the zygote, which is
// single-threaded, so no lock of the C library is held at the clone. It is the raw system call
// (glibc's fork takes no flags); the child's C library keeps the zygote's cached thread id, which
// nothing a worker runs reads (raise() and abort() ask the kernel). (Until 2026-12-07 a short-lived
// child unshared CLONE_NEWPID and forked the process: two forks and an exit a worker, with the
// zygote waiting for them, 4.6 workers a cached evaluation.)
template <class F>
json fork_child_in_pid_namespace(const char* op, const std::vector<int>& fds, size_t want_fds, F child) {
  if (fds.size() != want_fds) return wrong_fd_count(op, want_fds);
  const long pid = syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid < 0)
    return {{"error", std::string(op) + ": cannot start a process in a pid namespace of its own: " + std::strerror(errno)}};
  if (pid == 0) {
    child_common();
    child();
    _exit(1);
  }
  return {{"pid", static_cast<pid_t>(pid)}};
}

json serve_worker(const json& req, std::vector<int>& fds, const HostIsolation& host) {
  const std::string spec = req.at("spec").get<std::string>();
  auto body = [&] {
    devnull_stdio(true);
    place_fds(fds);  // 3 = socket, 4 = status page
    _exit(worker_process_main(spec, 3, 4, host));
  };
  // cpu workers (the minimal root: host code of the answer runs in them) get a pid namespace of
  // their own where the host allows one; cuda workers' driver sees the host's /proc.
  const json s = json::parse(spec);
  if (host.pidns_ok && s.value("mode", "off") != "off" && s.value("fs", "") == "minimal")
    return fork_child_in_pid_namespace("worker", fds, 2, body);
  return fork_child("worker", fds, 2, body);
}

json serve_exec(const json& req, std::vector<int>& fds, const HostIsolation& host) {
  return fork_child("exec", fds, 2, [&] {
    int out = fds[0];
    devnull_stdio(false);
    dup2(out, 1);
    dup2(out, 2);
    place_fds(fds);  // 3 = output (also 1, 2), 4 = work folder
    close(3);
    const SandboxMode mode = sandbox_mode_from_string(req.at("mode").get<std::string>());
    ChildSandbox cs;
    cs.fs = mode == SandboxMode::off ? ChildSandbox::Fs::none : ChildSandbox::Fs::minimal;
    cs.no_processes = false;  // a compiler driver runs cc1plus, as and ld
    cs.drop_privileges = mode != SandboxMode::off;
    cs.bind_rw_path = req.at("work_dir").get<std::string>();
    cs.extra_ro = req.at("extra_ro").get<std::vector<std::string>>();
    cs.address_space_mb = req.at("address_space_mb").get<int64_t>();
    cs.file_size_mb = req.at("file_size_mb").get<int64_t>();
    cs.open_files = 1024;
    cs.scratch_mb = 512;
    AppliedSandbox a;
    if (mode != SandboxMode::off) {
      a = enter_child_sandbox(cs, host);
    } else {
      rlimit no_core{0, 0};
      setrlimit(RLIMIT_CORE, &no_core);
    }
    if (mode == SandboxMode::strict && !a.failed.empty()) {
      std::string m = "leap-sandbox: cannot sandbox the command:";
      for (const auto& f : a.failed) m += " " + f + ";";
      write_all(1, m + "\n");
      _exit(126);
    }
    if (a.filesystem ? chdir("/build") != 0 : fchdir(4) != 0) {
      write_all(1, std::string("leap-sandbox: chdir: ") + std::strerror(errno) + "\n");
      _exit(126);
    }
    close(4);
    const auto args = req.at("argv").get<std::vector<std::string>>();
    std::vector<char*> argv;
    for (const auto& s : args) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    write_all(1, std::string("leap-exec-failed: ") + args[0] + ": " + std::strerror(errno) + "\n");
    _exit(127);
  });
}

json serve_call(const json& req, std::vector<int>& fds) {
  return fork_child("call", fds, 1, [&] {
    devnull_stdio(true);
    const std::string fn = req.at("function").get<std::string>();
    const std::string arg = req.at("arg").get<std::string>();
    std::string text;
#if LEAP_HAVE_NVRTC
    if (fn == "cuda_probe") text = cuda_probe_text(std::atoi(arg.c_str()));
#endif
    if (text.empty()) text = "error\nunknown zygote function '" + fn + "'";
    write_all(fds[0], text);
    _exit(0);
  });
}

// Exit statuses of the zygote's own children reaped early (reap_strays), until asked for.
struct Reaped {
  int status;
  long maxrss_kb;
};
std::map<pid_t, Reaped> g_reaped;
std::set<pid_t> g_children;

// The zygote is a child subreaper: processes orphaned by a worker or a command (a compiler's
// helpers, or whatever an unsandboxed job forked) are reparented to it and reaped here, so none
// stays behind as a zombie. A child of its own is kept in g_reaped for its `wait`.
void reap_strays() {
  for (;;) {
    int st = 0;
    rusage ru{};
    pid_t r = wait4(-1, &st, WNOHANG, &ru);
    if (r <= 0) return;
    if (g_children.count(r)) g_reaped[r] = {st, ru.ru_maxrss};
  }
}

json serve_wait(const json& req) {
  const pid_t pid = req.at("pid").get<pid_t>();
  g_children.erase(pid);
  if (auto it = g_reaped.find(pid); it != g_reaped.end()) {
    json j{{"status", it->second.status}, {"maxrss_kb", it->second.maxrss_kb}};
    g_reaped.erase(it);
    return j;
  }
  int st = 0;
  rusage ru{};
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    pid_t r = wait4(pid, &st, WNOHANG, &ru);
    if (r == pid) break;
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return {{"status", -1}, {"maxrss_kb", 0}};
    if (Clock::now() > deadline) {  // still running after its socket or pipe closed: end it
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR) {
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return {{"status", st}, {"maxrss_kb", ru.ru_maxrss}};
}

// Folds the zygote's anonymous memory (about 130 MB after LibTorch's static initialisers) into
// huge pages (MADV_COLLAPSE, Linux 6.1+), so each fork copies a few hundred page-table entries
// instead of tens of thousands: fork + exit of a worker drops from ~5 ms to well under 1 ms.
// Best effort: on older kernels, or without THP, nothing changes.
void collapse_anonymous_memory() {
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const uintptr_t huge = uintptr_t(2) << 20;
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {0};
    unsigned long long off = 0;
    char dev[16] = {0};
    unsigned long inode = 1;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %llx %15s %lu", &lo, &hi, perms, &off, dev, &inode) < 6) continue;
    if (inode != 0 || perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p') continue;  // private anonymous rw
    if (line.find("[stack]") != std::string::npos || line.find("[v") != std::string::npos) continue;
    const uintptr_t a = (lo + huge - 1) & ~(huge - 1), b = hi & ~(huge - 1);
    if (b > a) madvise(reinterpret_cast<void*>(a), b - a, MADV_COLLAPSE);
  }
}

}  // namespace

bool is_zygote_invocation(int argc, char** argv) { return argc >= 4 && std::strcmp(argv[1], "__leap_zygote") == 0; }

int zygote_main(int argc, char** argv) {
  if (!is_zygote_invocation(argc, argv)) return 2;
  const int ctl = std::atoi(argv[2]);
  const pid_t parent = static_cast<pid_t>(std::atol(argv[3]));
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) return 0;
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  HostIsolation host = make_host_isolation(SandboxMode::auto_);
  const SandboxReport report = probe_sandbox(host, SandboxMode::auto_);
  host.filesystem_ok = report.filesystem;  // children attempt only what worked in the probe
  host.seccomp_ok = report.seccomp;
  host.pidns_ok = report.pid_namespace;
  collapse_anonymous_memory();
  if (!send_packet(ctl, json{{"hello", report_to_json(report)}}.dump(), {})) return 1;
  for (;;) {
    std::string body;
    std::vector<int> fds;
    pollfd p{ctl, POLLIN, 0};
    int pr = poll(&p, 1, 200);
    if (pr == 0 || (pr < 0 && errno == EINTR)) {
      reap_strays();  // orphans that died since the last request
      continue;
    }
    if (!recv_packet(ctl, body, fds, -1)) return 0;  // the parent is gone
    json reply;
    bool answer = true;  // every request is answered but "forget", which its sender does not wait for
    try {
      json req = json::parse(body);
      const std::string op = req.at("op").get<std::string>();
      if (op == "worker")
        reply = serve_worker(req, fds, host);
      else if (op == "exec")
        reply = serve_exec(req, fds, host);
      else if (op == "call")
        reply = serve_call(req, fds);
      else if (op == "wait")
        reply = serve_wait(req);
      else if (op == "tracked")  // (tests) children whose status is still kept for a wait
        reply = {{"tracked", g_children.size() + g_reaped.size()}};
      else if (op == "forget") {  // children the caller killed and needs no status of: reaped in the background
        answer = false;
        for (const auto& p : req.at("pids")) {
          g_children.erase(p.get<pid_t>());
          g_reaped.erase(p.get<pid_t>());
        }
      } else
        reply = {{"error", "unknown op '" + op + "'"}};
    } catch (const std::exception& e) {
      reply = {{"error", std::string("bad request: ") + e.what()}};
    }
    for (int fd : fds) close(fd);
    if (reply.contains("pid") && !reply.contains("status")) g_children.insert(reply["pid"].get<pid_t>());
    reap_strays();
    if (answer && !send_packet(ctl, reply.dump(), {})) return 0;
  }
}

// ---- client side -------------------------------------------------------------------------------

std::string worker_executable() {
  if (const char* e = std::getenv("LEAP_WORKER_EXE"); e && *e) {
    if (access(e, X_OK) != 0) throw Error(std::string("LEAP_WORKER_EXE=") + e + " is not an executable");
    return e;
  }
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error("cannot find this process's executable (/proc/self/exe)");
  std::string self(buf, static_cast<size_t>(n));
  const size_t slash = self.rfind('/');
  const std::string base = self.substr(slash + 1);
  if (base == "leap") return self;
  const std::string sibling = self.substr(0, slash + 1) + "leap";
  if (access(sibling.c_str(), X_OK) == 0) return sibling;
  throw Error("cannot find the leap executable that starts sandboxed workers (looked for " + sibling +
              "); set LEAP_WORKER_EXE to its path");
}

std::string lean_worker_executable() {
  if (const char* e = std::getenv("LEAP_CPU_WORKER_EXE"); e && *e) {
    if (access(e, X_OK) != 0) throw Error(std::string("LEAP_CPU_WORKER_EXE=") + e + " is not an executable");
    return e;
  }
  auto beside = [](const std::string& exe) {
    const size_t slash = exe.rfind('/');
    return exe.substr(0, slash == std::string::npos ? 0 : slash + 1) + "leap-worker";
  };
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) {
    const std::string self(buf, static_cast<size_t>(n));
    if (self.substr(self.rfind('/') + 1) == "leap-worker") return self;
    if (const std::string p = beside(self); access(p.c_str(), X_OK) == 0) return p;
  }
  const std::string leap = worker_executable();
  if (const std::string p = beside(leap); access(p.c_str(), X_OK) == 0) return p;
  static std::once_flag said;
  std::call_once(said, [&] {
    spdlog::warn("no leap-worker executable beside {}: cpu answers run in workers of the leap executable, "
                 "with LibTorch's libraries mapped (set LEAP_CPU_WORKER_EXE, or build the leap-worker target)",
                 leap);
  });
  return leap;
}

Zygote& Zygote::shared() {
  static Zygote* z = new Zygote(ZygoteImage::lean);  // never destroyed: the zygote dies with the process
  return *z;
}

Zygote& Zygote::with_libtorch() {
  static Zygote* z = new Zygote(ZygoteImage::leap);
  return *z;
}

Zygote& Zygote::for_backend(const std::string& name) { return name == "cpu" ? shared() : with_libtorch(); }

void Zygote::stop_locked() {
  if (ctl_ >= 0) close(ctl_);
  ctl_ = -1;
  {
    // Its children die with it: pids released but not yet sent are not sent to a new zygote (one
    // of whose children could have the same pid).
    std::lock_guard<std::mutex> lock(released_mutex_);
    released_.clear();
  }
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int st;
    waitpid(pid_, &st, 0);
    pid_ = -1;
  }
}

void Zygote::start_locked() {
  stop_locked();
  const std::string exe = image_ == ZygoteImage::lean ? lean_worker_executable() : worker_executable();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    throw Error(std::string("zygote socketpair: ") + std::strerror(errno));
  const std::vector<std::string> env = zygote_environment();
  pid_t pid = Forker::get().run([&]() -> pid_t {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 3);
    posix_spawn_file_actions_addclosefrom_np(&fa, 4);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    const std::string parent = std::to_string(getpid());
    std::vector<char*> argv{const_cast<char*>(exe.c_str()), const_cast<char*>("__leap_zygote"), const_cast<char*>("3"),
                            const_cast<char*>(parent.c_str()), nullptr};
    std::vector<char*> envp;
    for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    pid_t p = -1;
    int rc = posix_spawn(&p, exe.c_str(), &fa, &at, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    if (rc != 0) {
      errno = rc;
      return -1;
    }
    return p;
  });
  const int spawn_errno = errno;
  close(sv[1]);
  if (pid < 0) {
    close(sv[0]);
    throw Error("cannot start the zygote " + exe + ": " + std::strerror(spawn_errno));
  }
  std::string body;
  std::vector<int> fds;
  if (!recv_packet(sv[0], body, fds, 120000)) {
    close(sv[0]);
    kill(pid, SIGKILL);
    int st;
    waitpid(pid, &st, 0);
    throw Error("the zygote " + exe + " did not start (no hello within 120 s; is it a leap binary of this build?)");
  }
  ctl_ = sv[0];
  pid_ = pid;
  report_ = report_from_json(json::parse(body).at("hello").get<std::string>());
}

void Zygote::flush_released_locked() {
  std::vector<pid_t> pids;
  {
    std::lock_guard<std::mutex> lock(released_mutex_);
    pids.swap(released_);
  }
  if (pids.empty() || ctl_ < 0) return;  // (no zygote: its children died with it)
  if (!send_packet(ctl_, json{{"op", "forget"}, {"pids", pids}}.dump(), {})) stop_locked();
}

std::string Zygote::request_locked(const std::string& body, const std::vector<int>& fds) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (ctl_ < 0) start_locked();
    flush_released_locked();
    if (ctl_ < 0) continue;
    std::string reply;
    std::vector<int> got;
    if (send_packet(ctl_, body, fds) && recv_packet(ctl_, reply, got, 120000)) {
      for (int fd : got) close(fd);
      flush_released_locked();  // what was released while this request waited
      return reply;
    }
    // The zygote died or hangs: start a fresh one once (its old children die with it).
    stop_locked();
  }
  throw Error("the zygote does not answer");
}

std::string Zygote::request(const std::string& body, const std::vector<int>& fds) {
  std::lock_guard<std::mutex> lock(mutex_);
  return request_locked(body, fds);
}

SandboxReport Zygote::report() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ctl_ < 0) start_locked();
  return report_;
}

pid_t Zygote::pid() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ctl_ < 0) start_locked();
  return pid_;
}

namespace {
pid_t pid_of(const std::string& reply, const char* what) {
  json j = json::parse(reply);
  if (j.contains("error")) throw Error(std::string("the zygote could not start ") + what + ": " + j["error"].get<std::string>());
  return j.at("pid").get<pid_t>();
}
}  // namespace

pid_t Zygote::spawn_worker(const std::string& spec_json, int socket_fd, int status_fd) {
  return pid_of(request(json{{"op", "worker"}, {"spec", spec_json}}.dump(), {socket_fd, status_fd}), "a worker");
}

void Zygote::release(pid_t pid) {
  {
    std::lock_guard<std::mutex> lock(released_mutex_);
    released_.push_back(pid);
  }
  // Sent now when no other request is under way; else by that request when it ends (the caller
  // never waits for the zygote, which may be starting a worker).
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (lock.owns_lock()) flush_released_locked();
}

size_t Zygote::tracked() {
  return json::parse(request(json{{"op", "tracked"}}.dump(), {})).at("tracked").get<size_t>();
}

int Zygote::wait(pid_t pid, long* maxrss_kb) {
  json j = json::parse(request(json{{"op", "wait"}, {"pid", pid}}.dump(), {}));
  if (maxrss_kb) *maxrss_kb = j.at("maxrss_kb").get<long>();
  return j.at("status").get<int>();
}

util::ProcessResult Zygote::run(const std::vector<std::string>& argv, const CommandSandbox& sb,
                                const util::ProcessOptions& options) {
  if (argv.empty()) throw Error("Zygote::run: empty argv");
  util::ProcessResult res;
  const auto start = Clock::now();
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  const std::string dir = sb.work_dir.empty() ? options.cwd : sb.work_dir;
  int dfd = open(dir.empty() ? "." : dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) {
    close(p[0]);
    close(p[1]);
    throw Error("cannot open the work folder " + dir + ": " + std::strerror(errno));
  }
  // On a root host the command runs as uid 65534: it must be able to write its work folder.
  if (geteuid() == 0 && sb.mode != SandboxMode::off && !dir.empty())
    (void)!chown(dir.c_str(), 65534, 65534);  // if it fails, the compile's own error says so
  json req{{"op", "exec"},           {"argv", argv},          {"mode", to_string(sb.mode)}, {"work_dir", dir},
           {"extra_ro", sb.extra_ro}, {"address_space_mb", sb.address_space_mb},
           {"file_size_mb", sb.file_size_mb}};
  pid_t pid;
  try {
    pid = pid_of(request(req.dump(), {p[1], dfd}), "a command");
  } catch (...) {
    close(p[0]);
    close(p[1]);
    close(dfd);
    throw;
  }
  close(p[1]);
  close(dfd);
  const bool timed = options.timeout_s > 0;
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.timeout_s));
  if (!read_until_eof(p[0], res.output, options.max_output_bytes, &res.truncated, deadline, timed)) {
    res.timed_out = true;
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  }
  close(p[0]);
  const int st = wait(pid);
  res.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  if (WIFEXITED(st)) {
    res.exit_code = WEXITSTATUS(st);
    if (res.exit_code == 127 && res.output.rfind("leap-exec-failed: ", 0) == 0) res.exec_failed = true;
    if (res.exit_code == 126 && res.output.rfind("leap-sandbox: ", 0) == 0)
      throw Error(res.output.substr(0, res.output.find('\n')));
  } else if (WIFSIGNALED(st)) {
    res.term_signal = WTERMSIG(st);
  }
  return res;
}

std::string Zygote::call(const std::string& function, const std::string& arg, double timeout_s) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno));
  pid_t pid;
  try {
    pid = pid_of(request(json{{"op", "call"}, {"function", function}, {"arg", arg}}.dump(), {p[1]}), "a call");
  } catch (...) {
    close(p[0]);
    close(p[1]);
    throw;
  }
  close(p[1]);
  std::string out;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  bool done = read_until_eof(p[0], out, 1 << 20, nullptr, deadline, true);
  close(p[0]);
  if (!done) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  }
  wait(pid);
  if (!done) throw Error("the zygote's " + function + " did not finish within " + std::to_string(static_cast<int>(timeout_s)) + " s");
  return out;
}

}  // namespace leap::env
