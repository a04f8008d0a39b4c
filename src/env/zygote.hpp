#pragma once
// The zygote: a `leap` process started by exec (`leap __leap_zygote FD PPID`, env/worker_exe),
// never by a plain fork of the trainer, so it holds none of the trainer's memory (policy weights,
// database handles, task files) and no CUDA state. It makes its network namespace once
// (env/sandbox_child.hpp), probes the sandbox, and then forks on request:
//   * workers (WorkerPool): sandboxed, then serve jobs over the socket they were handed;
//   * sandboxed commands (the host compiler, nm) whose output comes back through a pipe;
//   * a CUDA probe child (CudaBackend), so a parent that has started CUDA can still ask.
// Requests travel over one SOCK_SEQPACKET socket (JSON + SCM_RIGHTS file descriptors) and are
// served one at a time. The zygote dies with the process that started it (PR_SET_PDEATHSIG), and
// its children die with it.
#include <sys/types.h>

#include <mutex>
#include <string>
#include <vector>

#include "env/sandbox.hpp"
#include "util/subprocess.hpp"

namespace leap::env {

/// How a sandboxed command (Zygote::run) may touch files.
struct CommandSandbox {
  std::string work_dir;                ///< host folder mounted writable at /build (the cwd); required
  std::vector<std::string> extra_ro;   ///< more host paths visible read-only (a compiler outside /usr)
  int64_t address_space_mb = 8192;     ///< RLIMIT_AS of the command, MB
  int64_t file_size_mb = 256;          ///< RLIMIT_FSIZE, MB
  SandboxMode mode = SandboxMode::auto_;
};

/// Which executable a zygote runs (issue "Environment V"): `leap-worker`, which never maps
/// LibTorch (nor MKL, oneDNN or SLEEF), for cpu workers, whose answers' host code runs in the
/// worker's process, and for sandboxed commands; or `leap` itself, for cuda workers (they run the
/// reference with LibTorch on the GPU, and no host code of the answer).
enum class ZygoteImage { lean, leap };

/// Client side of the zygote. Thread-safe; requests are served one at a time.
class Zygote {
 public:
  /// The process-wide lean zygote (lean_worker_executable(): no LibTorch), started on first use:
  /// cpu workers and sandboxed commands. Throws leap::Error when it cannot be started.
  static Zygote& shared();
  /// The process-wide zygote of the `leap` executable (worker_executable()), started on first
  /// use: cuda workers and the CUDA probe. Throws leap::Error when it cannot be started.
  static Zygote& with_libtorch();
  /// The zygote for workers of backend `name`: shared() for "cpu", else with_libtorch().
  static Zygote& for_backend(const std::string& name);

  /// The sandbox this host allows (the zygote's probe at start).
  SandboxReport report();

  /// Forks a worker that applies the sandbox in `spec_json` (see worker_pool.cpp) and then serves
  /// jobs on `socket_fd` with the backend described there; `status_fd` is a memfd page the worker
  /// maps for its current launch index. Returns the worker's pid (its own process group). Both
  /// fds stay open here (the caller closes them). Throws leap::Error.
  pid_t spawn_worker(const std::string& spec_json, int socket_fd, int status_fd);

  /// Runs `argv` (argv[0] looked up in PATH) in the sandbox, in `sandbox.work_dir`, with stdin
  /// from /dev/null and stdout+stderr captured, under `options.timeout_s` (wall clock; the whole
  /// process group is killed at the limit). Same result as util::run_process. Throws leap::Error
  /// when the sandbox cannot be set up and `sandbox.mode` is strict, or the zygote fails.
  util::ProcessResult run(const std::vector<std::string>& argv, const CommandSandbox& sandbox,
                          const util::ProcessOptions& options = {});

  /// Runs a registered function of the zygote in a forked child and returns what it wrote
  /// ("cuda_probe" with the device ordinal as `arg`: cuda_driver.hpp). Throws leap::Error.
  std::string call(const std::string& function, const std::string& arg, double timeout_s);

  /// Waits for child `pid` of the zygote (after the caller killed it, or it exited) and returns
  /// its wait status; `*maxrss_kb` (if given) gets its peak resident memory. Throws leap::Error.
  int wait(pid_t pid, long* maxrss_kb = nullptr);

  /// Forgets child `pid` (which the caller killed and whose status it does not need): the zygote
  /// reaps it in the background. Never waits for the zygote: the pid is sent at once when no
  /// other request is under way, else when that request ends (one "forget" packet, no reply).
  void release(pid_t pid);

  /// How many children the zygote keeps a record of for a later wait (started and neither waited
  /// for nor released, and statuses not yet collected); tests. Throws leap::Error.
  size_t tracked();

  /// The zygote's own pid (tests).
  pid_t pid();

 private:
  explicit Zygote(ZygoteImage image) : image_(image) {}
  ZygoteImage image_;
  void stop_locked();   ///< closes the control socket, kills and reaps the zygote (mutex held)
  void start_locked();
  std::string request_locked(const std::string& body, const std::vector<int>& fds);
  std::string request(const std::string& body, const std::vector<int>& fds);
  void flush_released_locked();  ///< sends the released pids, if any (mutex_ held)

  std::mutex mutex_;
  int ctl_ = -1;
  pid_t pid_ = -1;
  SandboxReport report_;
  std::mutex released_mutex_;     ///< guards released_ (taken without mutex_)
  std::vector<pid_t> released_;   ///< released children not yet sent to the zygote
};

/// True when argv asks for the zygote (argv[1] == "__leap_zygote").
bool is_zygote_invocation(int argc, char** argv);
/// The zygote's main: serves requests until its socket closes. Returns the exit status.
int zygote_main(int argc, char** argv);

/// The `leap` executable that serves as zygote: $LEAP_WORKER_EXE, else this process's own
/// executable when it is `leap`, else `leap` in the same folder (tests and benches beside it).
/// Throws leap::Error when none exists.
std::string worker_executable();

/// The lean executable that serves as the cpu zygote: $LEAP_CPU_WORKER_EXE, else `leap-worker`
/// beside this process's executable or beside worker_executable(). When none exists, the `leap`
/// executable itself, with a warning (its cpu workers then have LibTorch mapped).
std::string lean_worker_executable();

}  // namespace leap::env
