#include "rl/crash_guard.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>

#include "env/zygote.hpp"
#include "store/store.hpp"
#include "util/fatal.hpp"

namespace leap::rl {

namespace {

// Everything the handler needs, prepared before any fault (no allocation in the handler).
constexpr size_t kArg = 4096;
char g_exe[kArg], g_db[kArg], g_run[256], g_pid[32];
bool g_armed = false;
struct sigaction g_old[32];
const int kSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
std::terminate_handler g_old_terminate = nullptr;

/// Forks and execs the helper for the guarded run, once; `status` is nullptr (failed) or
/// "interrupted". Only fork, execve and waitpid: callable from a signal handler. With `wait`
/// false the caller exits next and the helper finishes on its own: it may need the store's write
/// lock that a thread of this process holds (the signal may interrupt a write), which the
/// process's exit releases; waiting would have held both for the store's 10-s busy timeout, and
/// then the run would stay `running`.
void run_helper_as(const char* reason, const char* status, bool wait = true) {
  if (!g_armed) return;
  g_armed = false;  // once
  pid_t pid = fork();
  if (pid == 0) {
    char* argv[] = {g_exe, const_cast<char*>("__leap_mark_failed"), g_db, g_run, g_pid, const_cast<char*>(reason),
                    const_cast<char*>(status), nullptr};
    char* envp[] = {nullptr};
    execve(g_exe, argv, envp);
    _exit(127);
  }
  if (pid > 0 && wait) {
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
}

void run_helper(const char* reason) { run_helper_as(reason, nullptr); }

const char* signal_reason(int sig) {
  switch (sig) {
    case SIGSEGV: return "the training process died of SIGSEGV (segmentation fault)";
    case SIGBUS: return "the training process died of SIGBUS (bus error)";
    case SIGFPE: return "the training process died of SIGFPE (arithmetic exception)";
    case SIGILL: return "the training process died of SIGILL (illegal instruction)";
    case SIGABRT: return "the training process died of SIGABRT (abort)";
  }
  return "the training process died of a fatal signal";
}

void on_fatal(int sig) {
  run_helper(signal_reason(sig));
  signal(sig, SIG_DFL);
  raise(sig);
}

void on_terminate() {
  run_helper("the training process called std::terminate (an uncaught exception or a broken invariant)");
  if (g_old_terminate) g_old_terminate();
  std::abort();
}

void copy(char* dst, size_t n, const std::string& s) {
  std::strncpy(dst, s.c_str(), n - 1);
  dst[n - 1] = 0;
}

}  // namespace

CrashGuard::CrashGuard(const std::string& db_path, const std::string& run_id) {
  try {
    copy(g_exe, kArg, env::worker_executable());
  } catch (const std::exception&) {
    return;  // no leap binary to run: no guard
  }
  copy(g_db, kArg, db_path);
  copy(g_run, sizeof g_run, run_id);
  copy(g_pid, sizeof g_pid, std::to_string(getpid()));
  g_armed = true;
  struct sigaction sa {};
  sa.sa_handler = on_fatal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i) sigaction(kSignals[i], &sa, &g_old[i]);
  g_old_terminate = std::set_terminate(on_terminate);
  util::set_fatal_exit_hook(run_helper);  // e.g. a reference that never returns (env/reference.hpp)
}

CrashGuard::~CrashGuard() {
  if (!g_exe[0]) return;
  g_armed = false;
  for (size_t i = 0; i < sizeof kSignals / sizeof kSignals[0]; ++i) sigaction(kSignals[i], &g_old[i], nullptr);
  std::set_terminate(g_old_terminate);
  util::set_fatal_exit_hook(nullptr);
  g_exe[0] = 0;
}

void interrupt_exit_now() {
  run_helper_as("interrupted twice: the process stopped at once, during a step; the run resumes from its last checkpoint",
                "interrupted", /*wait=*/false);
  _exit(130);
}

bool is_mark_failed_invocation(int argc, char** argv) {
  return argc >= 6 && std::strcmp(argv[1], "__leap_mark_failed") == 0;
}

int mark_failed_main(int argc, char** argv) {
  if (!is_mark_failed_invocation(argc, argv)) return 1;
  try {
    store::Store db(argv[2]);
    const std::string run = argv[3];
    const int64_t pid = std::atoll(argv[4]);
    auto row = db.get_run(run);
    if (!row || row->status != store::RunStatus::running) return 1;
    if (auto lease = db.get_lease(run); lease && lease->pid != pid) return 1;  // not the dying process's run
    const bool interrupted = argc >= 7 && std::strcmp(argv[6], "interrupted") == 0;
    db.add_event(run, std::nullopt, interrupted ? "interrupt" : "error", argv[5]);
    db.finish_run(run, interrupted ? store::RunStatus::interrupted : store::RunStatus::failed);
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

}  // namespace leap::rl
