#pragma once
// The sandbox around every process that runs or compiles generated code (docs/env.md "Sandbox").
//
// Such processes are children of the zygote (env/zygote.hpp), a `leap` process started by exec
// that holds none of the trainer's memory and no CUDA state. What a child may do is decided here,
// before any generated code is loaded or any compiler runs:
//   * network: the zygote lives in its own network namespace (a loopback that is down, nothing
//     else); seccomp also refuses socket() for every family but AF_UNIX;
//   * files: the child gets its own mount namespace whose root is a fresh read-only tmpfs holding
//     only /usr, the /lib links, /etc/ld.so.cache, /etc/alternatives, five /dev nodes, a writable
//     per-job scratch tmpfs at /tmp (the working folder) and, for a compile, the build folder at
//     /build; on a root host the child also drops to uid/gid 65534 (nobody). cuda workers, whose
//     driver needs /dev, /proc and /sys, see the host's tree read-only instead;
//   * processes: seccomp refuses fork, vfork, clone without CLONE_THREAD, execve, ptrace,
//     namespaces, mounts, bpf, io_uring and similar (threads are fine); every child leads its own
//     process group, which is killed when its job ends; a cpu worker is pid 1 of a pid namespace
//     of its own (env/zygote.cpp), so no other process is visible to it by pid;
//   * limits: address space (RLIMIT_AS) of a worker = its size at start + its tensors + the memory
//     limit (and the pool watches its resident memory), file size, open files, core files, CPU time.
// Where the host lacks a protection (no user namespaces for a non-root user), the report says
// which, and SandboxMode::strict refuses to run without it.
#include <cstdint>
#include <string>
#include <vector>

namespace leap::env {

/// How much of the sandbox is required (`env.sandbox`).
enum class SandboxMode {
  off,     ///< no protection beyond process groups and time limits (for debugging)
  auto_,   ///< every protection the host allows; the missing ones are reported
  strict,  ///< refuse to run (leap::Error) unless every protection is in place
};

/// Parses "off" | "auto" | "strict"; throws leap::ConfigError otherwise.
SandboxMode sandbox_mode_from_string(const std::string& text);
/// The config spelling of `mode`.
const char* to_string(SandboxMode mode);

/// Limits and protections for the children of one pool or compiler.
struct SandboxOptions {
  SandboxMode mode = SandboxMode::auto_;
  /// Memory a cpu worker may use beyond its tensors, MB; 0 = default_worker_memory_mb().
  int64_t memory_mb = 0;
  int64_t scratch_mb = 64;     ///< size of the per-job scratch folder (/tmp, a tmpfs), MB
  int64_t file_size_mb = 64;   ///< RLIMIT_FSIZE: the largest file a child may write, MB
  int64_t open_files = 256;    ///< RLIMIT_NOFILE of a worker
  /// Threads of a cpu worker; past it the pool stops it (runtime_error). 256: far above what an
  /// honest answer starts (one per core), and four workers at it stay far below RLIMIT_NPROC's
  /// 4096 for all of uid 65534 (at 1024, four answers holding 1022 threads each would have made
  /// every other worker's and compiler's thread or fork fail: a red team, 2026-12-07).
  int64_t max_threads = 256;
  /// The file system a worker sees: "minimal" (cpu workers' root) or "host_readonly" (the host's
  /// tree read-only with a fresh /tmp: cuda workers); empty: by the backend. Tests use it to run
  /// a cpu worker under the cuda workers' file system.
  std::string filesystem;
};

/// The auto memory limit of a worker: a quarter of the machine's memory, clamped to
/// [1024, 8192] MB.
int64_t default_worker_memory_mb();
/// `memory_mb` when positive, else default_worker_memory_mb().
int64_t resolved_memory_mb(int64_t memory_mb);

/// What the host allows, as found by the zygote's probe at its start (a real child that applies
/// every step, so a "yes" here is a step that worked on this host).
struct SandboxReport {
  bool network = false;     ///< network namespace: no interface but a loopback that is down
  bool filesystem = false;  ///< mount namespace with the minimal read-only root
  bool seccomp = false;     ///< seccomp filter: no new processes, no sockets but AF_UNIX
  bool unprivileged = false;///< children run without privileges (uid 65534 on a root host, or a user namespace)
  /// cpu workers run as pid 1 of a pid namespace of their own: no other process is visible to
  /// them by pid (the host's, the spares', other answers' compilers)
  bool pid_namespace = false;
  std::string isolation;    ///< "root", "user namespace" or "none": how namespaces were made
  std::vector<std::string> missing;  ///< one line per protection the host lacks, with the reason
  /// One line: "sandbox: network, filesystem, processes (seccomp), unprivileged" or what is missing.
  std::string summary() const;
  /// True when nothing is missing.
  bool complete() const { return missing.empty(); }
};

/// The sandbox report of this host: starts the process-wide zygote if needed (Zygote::shared()).
/// Throws leap::Error when the zygote cannot be started.
SandboxReport host_sandbox_report();

}  // namespace leap::env
