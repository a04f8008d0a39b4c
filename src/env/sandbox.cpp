#include "env/sandbox.hpp"

#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "env/sandbox_child.hpp"
#include "env/zygote.hpp"
#include "util/error.hpp"

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

namespace leap::env {

using json = nlohmann::json;

SandboxMode sandbox_mode_from_string(const std::string& t) {
  if (t == "off") return SandboxMode::off;
  if (t == "auto") return SandboxMode::auto_;
  if (t == "strict") return SandboxMode::strict;
  throw ConfigError("env.sandbox: '" + t + "' is not one of off, auto, strict");
}

const char* to_string(SandboxMode m) {
  switch (m) {
    case SandboxMode::off: return "off";
    case SandboxMode::auto_: return "auto";
    case SandboxMode::strict: return "strict";
  }
  return "?";
}

int64_t default_worker_memory_mb() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  int64_t mb = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 4 / (1 << 20) : 4096;
  return std::clamp<int64_t>(mb, 1024, 8192);
}

int64_t resolved_memory_mb(int64_t m) { return m > 0 ? m : default_worker_memory_mb(); }

std::string SandboxReport::summary() const {
  std::string have;
  auto add = [&](bool on, const char* what) {
    if (on) have += std::string(have.empty() ? "" : ", ") + what;
  };
  add(network, "no network");
  add(filesystem, "minimal read-only root");
  add(seccomp, "seccomp (no processes, no sockets)");
  add(unprivileged, "unprivileged");
  add(pid_namespace, "own pid namespace");
  std::string s = "sandbox: " + (have.empty() ? std::string("none") : have) + " [" + isolation + "]";
  for (const auto& m : missing) s += "; missing: " + m;
  return s;
}

SandboxReport host_sandbox_report() { return Zygote::shared().report(); }

std::string report_to_json(const SandboxReport& r) {
  return json{{"network", r.network}, {"filesystem", r.filesystem}, {"seccomp", r.seccomp},
              {"unprivileged", r.unprivileged}, {"pid_namespace", r.pid_namespace}, {"isolation", r.isolation},
              {"missing", r.missing}}
      .dump();
}

SandboxReport report_from_json(const std::string& text) {
  json j = json::parse(text);
  SandboxReport r;
  r.network = j.at("network").get<bool>();
  r.filesystem = j.at("filesystem").get<bool>();
  r.seccomp = j.at("seccomp").get<bool>();
  r.unprivileged = j.at("unprivileged").get<bool>();
  r.pid_namespace = j.value("pid_namespace", false);  // (absent from a zygote built before it)
  r.isolation = j.at("isolation").get<std::string>();
  r.missing = j.at("missing").get<std::vector<std::string>>();
  return r;
}

// ---- child side ------------------------------------------------------------------------------

namespace {

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

bool write_proc(const char* path, const std::string& text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#endif
struct leap_mount_attr {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};

// Makes the mount at `path` (and, with `recursive`, those below it) read-only and nosuid.
bool make_readonly(const char* path, bool recursive) {
#ifdef SYS_mount_setattr
  leap_mount_attr a{MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, 0, 0};
  if (syscall(SYS_mount_setattr, AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &a, sizeof a) == 0) return true;
  if (errno != ENOSYS) return false;
#endif
  // Older kernels: remount the top mount, keeping the flags a user namespace may not clear.
  struct statvfs st {};
  unsigned long keep = 0;
  if (statvfs(path, &st) == 0) {
    if (st.f_flag & ST_NODEV) keep |= MS_NODEV;
    if (st.f_flag & ST_NOEXEC) keep |= MS_NOEXEC;
    if (st.f_flag & ST_NOATIME) keep |= MS_NOATIME;
    if (st.f_flag & ST_RELATIME) keep |= MS_RELATIME;
  }
  return mount(nullptr, path, nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | keep, nullptr) == 0;
}

// Binds the host object open as `src_fd` at `dst` (created as a file or folder), read-only
// unless `writable`.
bool bind_fd(int src_fd, const std::string& dst, bool writable, std::string& err) {
  struct stat st {};
  if (fstat(src_fd, &st) != 0) return err = errno_text("fstat " + dst), false;
  if (S_ISDIR(st.st_mode)) {
    if (mkdir(dst.c_str(), 0755) != 0 && errno != EEXIST) return err = errno_text("mkdir " + dst), false;
  } else {
    int f = open(dst.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
    if (f < 0) return err = errno_text("create " + dst), false;
    close(f);
  }
  const std::string src = "/proc/self/fd/" + std::to_string(src_fd);
  if (mount(src.c_str(), dst.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0)
    return err = errno_text("bind " + dst), false;
  if (!writable && !make_readonly(dst.c_str(), true)) return err = errno_text("read-only " + dst), false;
  return true;
}

bool mkdirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i)
    if (i == path.size() || path[i] == '/') {
      std::string p = path.substr(0, i);
      if (mkdir(p.c_str(), 0755) != 0 && errno != EEXIST) return false;
    }
  return true;
}

// The regular files this process maps (/proc/self/maps: executable, loader, libraries), by
// their canonical paths, and libmvec.so.1 beside the mapped libm (vectorised math that -O3
// code may call). Sorted, without duplicates.
std::vector<std::string> mapped_library_files() {
  std::set<std::string> files;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos || line.ends_with(" (deleted)")) continue;
    const std::string path = line.substr(slash);
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    files.insert(path);
  }
  for (const auto& f : std::vector<std::string>(files.begin(), files.end())) {
    const size_t cut = f.rfind('/');
    if (f.compare(cut + 1, 8, "libm.so.") != 0) continue;
    const std::string mvec = f.substr(0, cut) + "/libmvec.so.1";
    char real[PATH_MAX];
    if (realpath(mvec.c_str(), real) != nullptr) files.insert(real);
  }
  return {files.begin(), files.end()};
}

// /code of a cpu worker's root (ChildSandbox::kModulePath), after the pivot and before the root
// is made read-only: an executable tmpfs holding one empty file, read-only for everyone, whose
// write descriptor is returned; its folder made unwritable. -1 when a step failed (nothing is
// then mounted there).
int make_module_file() {
  if (mount("leap-code", "/code", "tmpfs", MS_NOSUID | MS_NODEV, "size=256m,mode=0755") != 0) return -1;
  const int fd = open(ChildSandbox::kModulePath, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444);
  if (fd < 0 || chmod("/code", 0555) != 0) {
    if (fd >= 0) close(fd);
    umount2("/code", MNT_DETACH);
    return -1;
  }
  return fd;
}

// The minimal root: see the file comment of sandbox.hpp. Returns "" or what failed; `module_fd`
// (libraries_only) gets make_module_file's descriptor.
std::string enter_minimal_root(const ChildSandbox& spec, int& module_fd) {
  // Every host source is opened first: mounting the new root over /tmp hides what lies below it.
  struct Src {
    std::string dst;
    int fd;
    bool writable;
  };
  std::vector<Src> srcs;
  std::vector<std::pair<std::string, std::string>> links;  // name -> target (merged /usr hosts)
  // In the new mount namespace: a bind source must be a mount of the caller's own namespace.
  if (unshare(CLONE_NEWNS) != 0) return errno_text("unshare(CLONE_NEWNS)");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno_text("make / private");
  auto add = [&](const std::string& host, const std::string& dst, bool writable) {
    int fd = open(host.c_str(), O_PATH | O_CLOEXEC);
    if (fd >= 0) srcs.push_back({dst, fd, writable});
  };
  if (spec.libraries_only) {
    for (const auto& f : mapped_library_files()) add(f, f, false);
  } else {
    add("/usr", "/usr", false);
  }
  for (const char* d : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    struct stat st {};
    if (lstat(d, &st) != 0) continue;
    if (S_ISLNK(st.st_mode)) {
      char buf[4096];
      ssize_t n = readlink(d, buf, sizeof buf - 1);
      if (n > 0) links.emplace_back(d, std::string(buf, static_cast<size_t>(n)));
    } else if (S_ISDIR(st.st_mode) && !spec.libraries_only) {
      add(d, d, false);
    }
  }
  for (const char* f : {"/etc/ld.so.cache", "/etc/alternatives"}) add(f, f, false);
  // A command's root (a compile) gets /dev/null only: `#include "/dev/zero"` (or urandom, full)
  // is a file the preprocessor reads without end, to gigabytes of memory (a red team: 2.4 GB in
  // 3 s). The compiler needs none of them (GCC seeds from the time without /dev/urandom).
  for (const char* n : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"})
    if (spec.libraries_only || std::string(n) == "/dev/null") add(n, n, false);
  for (const auto& p : spec.extra_ro) add(p, p, false);
  if (!spec.bind_rw_path.empty()) {
    const size_t before = srcs.size();
    add(spec.bind_rw_path, "/build", true);
    if (srcs.size() == before) return errno_text("open " + spec.bind_rw_path);
  }
  struct Closer {
    std::vector<Src>& s;
    ~Closer() {
      for (auto& x : s) close(x.fd);
    }
  } closer{srcs};

  const std::string R = "/tmp";
  if (mount("leap-root", R.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,mode=0755") != 0)
    return errno_text("mount the root tmpfs");
  std::string err;
  for (const auto& [name, target] : links)
    if (symlink(target.c_str(), (R + name).c_str()) != 0) return errno_text("symlink " + name);
  if (!mkdirs(R + "/etc") || !mkdirs(R + "/dev") || !mkdirs(R + "/tmp") || !mkdirs(R + "/build"))
    return errno_text("mkdir in the root");
  if (spec.libraries_only && !mkdirs(R + "/code")) return errno_text("mkdir /code");
  for (const auto& s : srcs) {
    const std::string dst = R + s.dst;
    const size_t slash = dst.rfind('/');
    if (slash != std::string::npos && slash > 0 && !mkdirs(dst.substr(0, slash))) return errno_text("mkdir " + dst);
    if (!bind_fd(s.fd, dst, s.writable, err)) return err;
  }
  // (/dev nodes keep working: the root tmpfs is nodev, but their binds are mounts of devtmpfs.)
  if (mkdir((R + "/.old").c_str(), 0700) != 0) return errno_text("mkdir .old");
  if (syscall(SYS_pivot_root, R.c_str(), (R + "/.old").c_str()) != 0) return errno_text("pivot_root");
  if (chdir("/") != 0) return errno_text("chdir /");
  if (umount2("/.old", MNT_DETACH) != 0) return errno_text("detach the old root");
  rmdir("/.old");
  const std::string scratch = "size=" + std::to_string(std::max<int64_t>(1, spec.scratch_mb)) + "m,mode=1777";
  // A cpu worker's scratch is noexec when its module has /code: nothing written there maps executable.
  if (spec.libraries_only) module_fd = make_module_file();
  const unsigned long scratch_flags = MS_NOSUID | MS_NODEV | (module_fd >= 0 ? MS_NOEXEC : 0);
  if (mount("leap-scratch", "/tmp", "tmpfs", scratch_flags, scratch.c_str()) != 0)
    return errno_text("mount the scratch tmpfs");
  if (mount(nullptr, "/", nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) != 0)
    return errno_text("make the root read-only");
  return "";
}

// The host's tree read-only, with a fresh scratch tmpfs at /tmp and /dev/shm (cuda workers).
std::string enter_host_readonly(const ChildSandbox& spec) {
  if (unshare(CLONE_NEWNS) != 0) return errno_text("unshare(CLONE_NEWNS)");
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno_text("make / private");
  if (!make_readonly("/", true)) return errno_text("make / read-only");
  const std::string scratch = "size=" + std::to_string(std::max<int64_t>(1, spec.scratch_mb)) + "m,mode=1777";
  if (mount("leap-scratch", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, scratch.c_str()) != 0)
    return errno_text("mount the scratch tmpfs");
  struct stat st {};
  if (stat("/dev/shm", &st) == 0 && mount("leap-shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, scratch.c_str()) != 0)
    return errno_text("mount /dev/shm");
  return "";
}

std::string drop_privileges(const HostIsolation& host) {
  if (host.root && geteuid() == 0) {
    const gid_t nobody = 65534;
    if (setgroups(0, nullptr) != 0) return errno_text("setgroups");
    if (setresgid(nobody, nobody, nobody) != 0) return errno_text("setresgid(65534)");
    if (setresuid(nobody, nobody, nobody) != 0) return errno_text("setresuid(65534)");
    return "";
  }
  // A user namespace (or a plain user): drop every capability, effective, permitted and bounding.
  for (int c = 0; c <= 63; ++c) prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (syscall(SYS_capset, &hdr, data) != 0) return errno_text("capset");
  return "";
}

std::string set_limit(int resource, rlim_t value, const char* name) {
  rlimit r{value, value};
  if (setrlimit(resource, &r) != 0) return errno_text(std::string("setrlimit ") + name);
  return "";
}

// seccomp through libseccomp: see sandbox.hpp.
std::string load_seccomp(bool no_processes, bool no_unix_connect) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return "seccomp_init failed";
  struct Free {
    scmp_filter_ctx c;
    ~Free() { seccomp_release(c); }
  } fr{ctx};
  int rc = 0;
  auto deny = [&](int sys, int err) {
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), sys, 0);
  };
  // Network: only AF_UNIX sockets (the worker's own socket is one).
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(socketpair), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX));
  // io_uring can do network and file work outside these rules.
  deny(SCMP_SYS(io_uring_setup), ENOSYS);
  deny(SCMP_SYS(io_uring_enter), ENOSYS);
  deny(SCMP_SYS(io_uring_register), ENOSYS);
  if (no_processes) {
    deny(SCMP_SYS(fork), EPERM);
    deny(SCMP_SYS(vfork), EPERM);
    deny(SCMP_SYS(execve), EPERM);
    deny(SCMP_SYS(execveat), EPERM);
    // clone3 passes its flags in memory that seccomp cannot read: ENOSYS makes glibc fall back to clone.
    deny(SCMP_SYS(clone3), ENOSYS);
    if (rc == 0)
      rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0));
    for (int sys : {SCMP_SYS(ptrace), SCMP_SYS(process_vm_readv), SCMP_SYS(process_vm_writev), SCMP_SYS(mount),
                    SCMP_SYS(umount2), SCMP_SYS(pivot_root), SCMP_SYS(chroot), SCMP_SYS(unshare), SCMP_SYS(setns),
                    SCMP_SYS(bpf), SCMP_SYS(perf_event_open), SCMP_SYS(userfaultfd), SCMP_SYS(keyctl),
                    SCMP_SYS(add_key), SCMP_SYS(request_key), SCMP_SYS(setsid), SCMP_SYS(setpgid),
                    SCMP_SYS(open_tree), SCMP_SYS(move_mount), SCMP_SYS(fsopen), SCMP_SYS(fsmount),
                    SCMP_SYS(name_to_handle_at), SCMP_SYS(open_by_handle_at), SCMP_SYS(kcmp), SCMP_SYS(seccomp)})
      deny(sys, EPERM);
    // The worker's timer (a clock_gettime system call from leap's own code, env/cpu_backend.cpp):
    // the code may neither filter that call (a seccomp filter of its own returning a forged time)
    // nor make the TSC trap (PR_SET_TSC).
    for (scmp_datum_t op : {scmp_datum_t(PR_SET_SECCOMP), scmp_datum_t(PR_SET_TSC)})
      if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(prctl), 1, SCMP_A0(SCMP_CMP_EQ, op));
    // Other processes: nothing that reaches another process (a compiler child of the same uid,
    // another worker, the host's nobody processes): no pidfds, signals only to itself, limits and
    // priorities only of itself; no System V IPC and no memfds (memory outside every limit).
    const scmp_datum_t me = static_cast<scmp_datum_t>(getpid());
    for (int sys : {SCMP_SYS(pidfd_open), SCMP_SYS(pidfd_getfd), SCMP_SYS(pidfd_send_signal),
                    SCMP_SYS(process_madvise), SCMP_SYS(tkill), SCMP_SYS(ioprio_set), SCMP_SYS(migrate_pages),
                    SCMP_SYS(move_pages)})
      deny(sys, EPERM);
    // (cpu workers only: the CUDA driver may use shared memory and memfds itself, and a cuda
    // worker runs no host code of the answer)
    if (no_unix_connect)
      for (int sys : {SCMP_SYS(shmget), SCMP_SYS(msgget), SCMP_SYS(semget), SCMP_SYS(memfd_create), SCMP_SYS(memfd_secret),
                      SCMP_SYS(mq_open)})
        deny(sys, EPERM);
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(kill), 1, SCMP_A0(SCMP_CMP_NE, me));
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(tgkill), 1, SCMP_A0(SCMP_CMP_NE, me));
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(rt_sigqueueinfo), 1, SCMP_A0(SCMP_CMP_NE, me));
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(rt_tgsigqueueinfo), 1, SCMP_A0(SCMP_CMP_NE, me));
    if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(prlimit64), 1, SCMP_A0(SCMP_CMP_NE, 0));
    // Priorities and scheduling of itself only: setpriority(PRIO_PROCESS, 0, n), and sched_set*
    // of pid 0 (the calling thread). PRIO_USER / PRIO_PGRP would renice every process of the
    // worker's uid (the spare workers that time the next answers, other answers' compilers), and
    // a pid reaches them (there is no pid namespace): refused, as is reading another process's
    // robust-futex list.
    // A cpu worker may not lower its own priority either: a thread at SCHED_IDLE (or nice 19)
    // that spins on a busy machine is always runnable yet gets almost no CPU, so it neither
    // reached its CPU-time limit nor looked idle (its run-queue wait counts as waiting for a
    // CPU), and held a grader until the wall-clock backstop (a red team: 40 s in a correctness
    // job, 120 s in a timing job, 2026-12-06). So no setpriority and no scheduling policy or
    // parameters at all; only its affinity, of the calling thread.
    if (no_unix_connect) {
      for (int sys : {SCMP_SYS(setpriority), SCMP_SYS(sched_setscheduler), SCMP_SYS(sched_setparam),
                      SCMP_SYS(sched_setattr)})
        deny(sys, EPERM);
    } else {
      if (rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setpriority), 1, SCMP_A1(SCMP_CMP_NE, 0));
      if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(setpriority), 1,
                              SCMP_A0(SCMP_CMP_NE, static_cast<scmp_datum_t>(PRIO_PROCESS)));
    }
    // (cpu workers only, like the rules below: the CUDA driver's own threads may set their
    // affinity by thread id, and a cuda worker runs no host code of the answer)
    for (int sys : {SCMP_SYS(sched_setaffinity), SCMP_SYS(get_robust_list)})
      if (no_unix_connect && rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), sys, 1, SCMP_A0(SCMP_CMP_NE, 0));
    // No new executable memory (cpu workers: the CUDA driver maps its own code): no PROT_EXEC
    // added to a mapping, none on anonymous memory, and no mode change (the module file and its
    // folder stay read-only to their owner too, env/sandbox_child.hpp ChildSandbox). Loading the
    // module maps its file executable, which stays allowed; patching code in place (libc's
    // clock_gettime made writable and executable, docs/env.md "Known limits") is refused.
    if (no_unix_connect) {
      for (int sys : {SCMP_SYS(mprotect), SCMP_SYS(pkey_mprotect)})
        if (rc == 0)
          rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), sys, 1,
                                SCMP_A2(SCMP_CMP_MASKED_EQ, static_cast<scmp_datum_t>(PROT_EXEC), static_cast<scmp_datum_t>(PROT_EXEC)));
      if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(mmap), 2,
                              SCMP_A2(SCMP_CMP_MASKED_EQ, static_cast<scmp_datum_t>(PROT_EXEC), static_cast<scmp_datum_t>(PROT_EXEC)),
                              SCMP_A3(SCMP_CMP_MASKED_EQ, static_cast<scmp_datum_t>(MAP_ANONYMOUS),
                                      static_cast<scmp_datum_t>(MAP_ANONYMOUS)));
      // No writable and executable mapping of anything (a private copy of a file, /dev/zero, a
      // module's own "awx" section: a red team ran written bytes through each), and no
      // personality(READ_IMPLIES_EXEC), which makes every readable mapping executable without
      // PROT_EXEC in the arguments: only the query personality(0xffffffff).
      if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(mmap), 1,
                              SCMP_A2(SCMP_CMP_MASKED_EQ, static_cast<scmp_datum_t>(PROT_WRITE | PROT_EXEC),
                                      static_cast<scmp_datum_t>(PROT_WRITE | PROT_EXEC)));
      if (rc == 0)
        rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                              SCMP_A0(SCMP_CMP_NE, static_cast<scmp_datum_t>(0xffffffffu)));
      for (int sys : {SCMP_SYS(chmod), SCMP_SYS(fchmod), SCMP_SYS(fchmodat)}) deny(sys, EPERM);
    }
    if (no_unix_connect && rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(connect), 0);
    if (no_unix_connect && rc == 0) rc = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(bind), 0);
  }
  if (rc != 0) return std::string("seccomp_rule_add: ") + std::strerror(-rc);
  if ((rc = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 1)) != 0) return std::string("seccomp no_new_privs: ") + std::strerror(-rc);
  if ((rc = seccomp_load(ctx)) != 0) return std::string("seccomp_load: ") + std::strerror(-rc);
  return "";
}

}  // namespace

HostIsolation make_host_isolation(SandboxMode mode) {
  HostIsolation h;
  if (mode == SandboxMode::off) {
    h.why_not = "env.sandbox is off";
    return h;
  }
  if (geteuid() == 0 && unshare(CLONE_NEWNET) == 0) {
    h.root = true;
    h.network = true;
    return h;
  }
  const uid_t uid = geteuid();
  const gid_t gid = getegid();
  if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0) {
    h.why_not = errno_text("no user namespaces (unshare(CLONE_NEWUSER))");
    return h;
  }
  h.userns = true;
  h.network = true;
  write_proc("/proc/self/setgroups", "deny");
  if (!write_proc("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
      !write_proc("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
    h.why_not = errno_text("cannot write the user namespace's id maps");
  return h;
}

AppliedSandbox enter_child_sandbox(const ChildSandbox& spec, const HostIsolation& host) {
  AppliedSandbox a;
  const bool ns = host.root || host.userns;
  if (spec.fs != ChildSandbox::Fs::none) {
    if (!host.filesystem_ok) {
      a.failed.push_back("filesystem isolation: not available on this host (see the sandbox report)");
    } else if (!ns) {
      a.failed.push_back("filesystem isolation: " + host.why_not);
    } else {
      std::string e = spec.fs == ChildSandbox::Fs::minimal ? enter_minimal_root(spec, a.module_fd) : enter_host_readonly(spec);
      if (e.empty())
        a.filesystem = true;
      else
        a.failed.push_back("filesystem isolation: " + e);
    }
  }
  // Its own System V IPC / POSIX message queue namespace: nothing shared with the host or other
  // jobs, and whatever it creates is gone when it exits.
  if (ns && unshare(CLONE_NEWIPC) != 0) a.failed.push_back(errno_text("unshare(CLONE_NEWIPC)"));
  // Its own host name: the host's (a red team printed it through an exception's text into the
  // feedback) is not the answer's to read. (uname's kernel release is the host's still.)
  if (ns) {
    static const char kName[] = "leap-sandbox";
    if (unshare(CLONE_NEWUTS) != 0 || sethostname(kName, sizeof kName - 1) != 0)
      a.failed.push_back(errno_text("unshare(CLONE_NEWUTS)"));
  }
  if (spec.drop_privileges) {
    std::string e = drop_privileges(host);
    if (e.empty())
      a.unprivileged = host.root || host.userns || geteuid() != 0;
    else
      a.failed.push_back("privileges: " + e);
    if (!a.unprivileged && e.empty()) a.failed.push_back("privileges: runs as root (no user namespace)");
  }
  std::string e;
  if (!(e = set_limit(RLIMIT_CORE, 0, "RLIMIT_CORE")).empty()) a.failed.push_back(e);
  if (spec.file_size_mb > 0 &&
      !(e = set_limit(RLIMIT_FSIZE, static_cast<rlim_t>(spec.file_size_mb) << 20, "RLIMIT_FSIZE")).empty())
    a.failed.push_back(e);
  if (spec.open_files > 0) {
    rlimit cur{};
    getrlimit(RLIMIT_NOFILE, &cur);
    const rlim_t want = std::min<rlim_t>(static_cast<rlim_t>(spec.open_files), cur.rlim_max);
    if (!(e = set_limit(RLIMIT_NOFILE, want, "RLIMIT_NOFILE")).empty()) a.failed.push_back(e);
  }
  if (spec.address_space_mb > 0 &&
      !(e = set_limit(RLIMIT_AS, static_cast<rlim_t>(spec.address_space_mb) << 20, "RLIMIT_AS")).empty())
    a.failed.push_back(e);
  // Threads of all of uid 65534 (a root host): a backstop to the pool's per-worker thread watch.
  if (spec.no_processes && host.root && spec.drop_privileges &&
      !(e = set_limit(RLIMIT_NPROC, 4096, "RLIMIT_NPROC")).empty())
    a.failed.push_back(e);
  if (spec.cpu_seconds > 0) {
    rlimit r{static_cast<rlim_t>(spec.cpu_seconds + 1), static_cast<rlim_t>(spec.cpu_seconds + 5)};
    if (setrlimit(RLIMIT_CPU, &r) != 0) a.failed.push_back(errno_text("setrlimit RLIMIT_CPU"));
  }
  if (!host.seccomp_ok) {
    a.failed.push_back("seccomp: not available on this host (see the sandbox report)");
  } else if (spec.fs != ChildSandbox::Fs::none || spec.no_processes) {
    std::string s = load_seccomp(spec.no_processes, spec.no_unix_connect);
    if (s.empty())
      a.seccomp = true;
    else
      a.failed.push_back("seccomp: " + s);
  }
  return a;
}

SandboxReport probe_sandbox(const HostIsolation& host, SandboxMode mode) {
  SandboxReport r;
  r.isolation = host.root ? "root" : host.userns ? "user namespace" : "none";
  if (mode == SandboxMode::off) {
    r.missing.push_back("everything: env.sandbox is off");
    return r;
  }
  r.network = host.network;
  if (!host.network) r.missing.push_back("network isolation: " + host.why_not);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    r.missing.push_back(errno_text("probe: pipe"));
    return r;
  }
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    // A pid namespace of its own, as cpu workers get (env/zygote.cpp): its first child must be pid 1.
    std::string pidns = "no namespaces on this host (" + host.why_not + ")";
    if (host.root || host.userns) {
      if (unshare(CLONE_NEWPID) != 0) {
        pidns = errno_text("unshare(CLONE_NEWPID)");
      } else if (pid_t g = fork(); g < 0) {
        pidns = errno_text("fork into the new pid namespace");
      } else if (g == 0) {
        _exit(getpid() == 1 ? 0 : 1);
      } else {
        int st = 0;
        while (waitpid(g, &st, 0) < 0 && errno == EINTR) {
        }
        pidns = WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "" : "the first child of a new pid namespace was not pid 1";
      }
    }
    ChildSandbox spec;
    AppliedSandbox a = enter_child_sandbox(spec, host);
    // A real check of each step from inside: the host's /etc is gone, a fork is refused.
    bool fs_ok = a.filesystem && access("/etc/ld.so.cache", R_OK) == 0 && access("/etc/passwd", F_OK) != 0;
    bool fork_refused = a.seccomp && syscall(SYS_fork) < 0;
    json j{{"filesystem", fs_ok}, {"seccomp", fork_refused}, {"unprivileged", a.unprivileged}, {"pid_namespace", pidns},
           {"failed", a.failed}};
    std::string text = j.dump();
    ssize_t w = write(fds[1], text.data(), text.size());
    (void)w;
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; pid > 0 && (n = read(fds[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (pid > 0) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
  }
  try {
    json j = json::parse(text);
    r.filesystem = j.at("filesystem").get<bool>();
    r.seccomp = j.at("seccomp").get<bool>();
    r.unprivileged = j.at("unprivileged").get<bool>();
    const std::string pidns = j.at("pid_namespace").get<std::string>();
    r.pid_namespace = pidns.empty();
    if (!r.pid_namespace) r.missing.push_back("pid namespace: " + pidns);
    for (const auto& f : j.at("failed")) r.missing.push_back(f.get<std::string>());
    if (!r.filesystem && r.missing.empty()) r.missing.push_back("filesystem isolation: the probe could still see the host's /etc");
    if (!r.seccomp) r.missing.push_back("seccomp: the probe could still fork");
  } catch (const std::exception& e) {
    r.missing.push_back(std::string("the sandbox probe failed: ") + e.what());
  }
  return r;
}

}  // namespace leap::env
