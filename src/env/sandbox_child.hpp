#pragma once
// Inside the zygote (env/zygote.cpp): the namespaces made once at its start, and the steps a
// forked child applies to itself before it runs a job or execs the compiler. Not for other callers.
#include <cstdint>
#include <string>
#include <vector>

#include "env/sandbox.hpp"

namespace leap::env {

/// What the zygote set up for itself at start (make_host_isolation), and what its probe found to
/// work (children attempt only those steps; probe_sandbox fills `filesystem_ok`, `seccomp_ok`).
struct HostIsolation {
  bool filesystem_ok = true;
  bool seccomp_ok = true;
  bool root = false;     ///< the zygote runs as root with CAP_SYS_ADMIN (no user namespace needed)
  bool userns = false;   ///< the zygote made a user namespace (non-root host that allows one)
  bool network = false;  ///< the zygote is in a fresh network namespace
  bool pidns_ok = false; ///< a child of the zygote can make a pid namespace (env/zygote.cpp starts cpu workers in one)
  std::string why_not;   ///< reason namespaces could not be made (empty when they could)
};

/// Unshares the zygote's network namespace (and, for a non-root user, a user namespace first).
/// `mode == off` makes none. Never throws: what failed is in why_not.
HostIsolation make_host_isolation(SandboxMode mode);

/// The sandbox of one child of the zygote.
struct ChildSandbox {
  enum class Fs { none, minimal, host_readonly };
  Fs fs = Fs::minimal;          ///< minimal root (cpu workers, compiles) or the host read-only (cuda)
  bool no_processes = true;     ///< seccomp worker profile (no fork/exec...); false: network filter only
  bool no_unix_connect = true;  ///< with no_processes: also refuse connect/bind, System V IPC and
                                ///< memfds (cpu workers; the CUDA driver may use all of them)
  bool drop_privileges = true;  ///< uid/gid 65534 on a root host; no capabilities in a user namespace
  std::string bind_rw_path;     ///< host folder mounted writable at /build (a compile's build folder)
  std::vector<std::string> extra_ro;  ///< more host paths visible read-only at the same path
  /// With Fs::minimal: in place of /usr and /lib, only the files this process has mapped (its
  /// executable, the dynamic loader, its libraries, from /proc/self/maps) and libmvec beside
  /// libm, each at its own path. For a cpu worker, which enters its sandbox once loaded: the
  /// answer's module then finds libc, libm, libstdc++ and libgcc_s loaded and no other library
  /// (a system-wide BLAS, OpenMP) to dlopen, and no header or tool to read.
  bool libraries_only = false;
  /// With libraries_only (cpu workers): no executable file the answer can write. The scratch /tmp
  /// is mounted noexec, and the answer's module is loaded from /code/module.so on an executable
  /// tmpfs whose folder nobody can write and whose file only the descriptor opened here
  /// (AppliedSandbox::module_fd, closed before the module loads) can: a library the answer
  /// writes (embedded at compile time, say) cannot be mapped executable, nor can anonymous memory
  /// (seccomp; docs/env.md "Sandbox").
  static constexpr const char* kModulePath = "/code/module.so";
  int64_t scratch_mb = 64;      ///< the /tmp tmpfs, MB
  int64_t file_size_mb = 64;    ///< RLIMIT_FSIZE, MB
  int64_t open_files = 256;     ///< RLIMIT_NOFILE
  int64_t address_space_mb = 0; ///< RLIMIT_AS of the whole process, MB (compiles); 0 = none
  double cpu_seconds = 0;       ///< RLIMIT_CPU backstop, s; 0 = none
};

/// What a child got (enter_child_sandbox).
struct AppliedSandbox {
  bool filesystem = false, seccomp = false, unprivileged = false;
  /// libraries_only: a write descriptor of ChildSandbox::kModulePath (the only one there can be),
  /// or -1 when that file could not be made (the module is then copied to /tmp, which stays
  /// executable).
  int module_fd = -1;
  std::vector<std::string> failed;  ///< one line per step that failed, with errno text
};

/// In a freshly forked child of the zygote: applies `spec` (mounts, privileges, limits, seccomp,
/// in that order; seccomp last). A step that fails is skipped and listed. Never throws.
AppliedSandbox enter_child_sandbox(const ChildSandbox& spec, const HostIsolation& host);

/// The zygote's probe: forks a child that applies the full cpu-worker sandbox and reports what
/// worked. Never throws.
SandboxReport probe_sandbox(const HostIsolation& host, SandboxMode mode);

/// Serialises a report for the zygote's hello message, and back.
std::string report_to_json(const SandboxReport& r);
SandboxReport report_from_json(const std::string& text);

}  // namespace leap::env
