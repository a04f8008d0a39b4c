#include "env/cpu_backend.hpp"

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "env/errors.hpp"
#include "env/input_rewrite.hpp"
#include "env/poison.hpp"
#include "env/run_sample.hpp"
#include "env/timing_schedule.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/subprocess.hpp"
#include "env/zygote.hpp"

namespace leap::env {

namespace fs = std::filesystem;

namespace {

/// Argument slot passed to a trampoline (the generated code declares the same union).
union LeapCpuArg {
  void* p;
  int64_t i;
  float f;
  double d;
};
using Trampoline = void (*)(void*, const LeapCpuArg*);

std::string trampoline_name(const std::string& sig) { return "__leap_call_" + (sig.empty() ? "v" : sig); }

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw Error("cannot write " + p.string());
}

// The first `max_errors` compiler errors with their context lines.
std::string compile_feedback(const std::string& log, int max_errors, size_t max_chars,
                             const std::string& header) {
  std::istringstream in(log);
  std::string line, kept;
  int errors = 0;
  bool started = false;
  while (std::getline(in, line)) {
    bool is_error = line.find("error:") != std::string::npos || line.find("undefined reference") != std::string::npos;
    if (is_error) {
      if (errors == max_errors) break;
      ++errors;
      started = true;
    }
    if (started) kept += line + "\n";
  }
  if (!started) kept = log;  // no recognisable error line: show the log as is
  // OpenMP's runtime is not linked (no -fopenmp in the default env.cpu.flags): say so, since the
  // linker's words alone read like a typo (testers, 2026-12-07).
  if (log.find("undefined reference to `omp_") != std::string::npos ||
      log.find("undefined reference to `GOMP_") != std::string::npos)
    kept = "note: OpenMP is not available here (the code is compiled without -fopenmp, so `#pragma omp` "
           "is ignored and omp_* functions are undefined); use std::thread for threads\n" + kept;
  return bound_text(header + kept, max_chars);
}

// Absolute path of `program` as execvp would find it; empty if not found.
std::string find_program(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::istringstream in(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(in, dir, ':');) {
    std::string p = (dir.empty() ? "." : dir) + "/" + program;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

// Runs a tool on untrusted input: in the zygote's sandbox, in `work` (seen as /build), or
// directly when the sandbox is off.
util::ProcessResult run_tool(const std::vector<std::string>& argv, const fs::path& work, const util::ProcessOptions& po,
                             SandboxMode mode, const std::vector<std::string>& extra_ro) {
  if (mode == SandboxMode::off) return util::run_process(argv, po);
  CommandSandbox sb;
  sb.work_dir = work.string();
  sb.extra_ro = extra_ro;
  sb.mode = mode;
  // Each process of the command (cc1plus, as, ld) within a cpu worker's memory: a quarter of the
  // machine, at most 8 GB (two compiles of a memory bomb at 8 GB each were most of a 24-GB host).
  sb.address_space_mb = std::min<int64_t>(sb.address_space_mb, default_worker_memory_mb());
  return Zygote::shared().run(argv, sb, po);
}

// Defined function symbols of a shared object (in `work`), through `nm -D`; empty if nm is
// unavailable.
std::set<std::string> list_exports(const fs::path& work, const std::string& so_name, SandboxMode mode) {
  util::ProcessOptions po;
  po.timeout_s = 30;
  po.cwd = work.string();
  auto r = run_tool({"nm", "-D", "--defined-only", "-P", so_name}, work, po, mode, {});
  std::set<std::string> out;
  if (!r.ok()) return out;
  std::istringstream in(r.output);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string name, type;
    if (!(ls >> name >> type)) continue;
    if (type != "T" && type != "W" && type != "i") continue;
    if (name.rfind("__leap_", 0) == 0 || name == "_init" || name == "_fini") continue;
    out.insert(name);
  }
  return out;
}

/// True when `line` of a compiler's log is text the answer chose: a quoted source line or caret
/// line (`   12 | code`, `      |   ^~~`), a diagnostic located in a source file (its message
/// quotes the code: `#error`, a static_assert message, a missing header's name), a context line
/// (`solution.cpp: In function ...`), or a linker complaint that names the answer's symbols.
/// A diagnostic whose kind is "internal compiler error" is the compiler's own even when located.
bool answer_chosen_line(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && line[i] == ' ') ++i;
  size_t j = i;
  while (j < line.size() && std::isdigit(static_cast<unsigned char>(line[j]))) ++j;
  while (j < line.size() && line[j] == ' ') ++j;
  if (j < line.size() && line[j] == '|') return true;  // a quoted source line or its caret
  // "file:line[:col]: kind: message" (file without spaces)
  const size_t colon = line.find(':');
  if (colon != std::string_view::npos && colon > 0 && line.substr(0, colon).find(' ') == std::string_view::npos) {
    size_t k = colon + 1;
    const size_t digits = k;
    while (k < line.size() && std::isdigit(static_cast<unsigned char>(line[k]))) ++k;
    if (k > digits && k < line.size() && line[k] == ':') {
      ++k;
      while (k < line.size() && std::isdigit(static_cast<unsigned char>(line[k]))) ++k;
      if (k < line.size() && line[k] == ':') ++k;
      while (k < line.size() && line[k] == ' ') ++k;
      return line.substr(k).rfind("internal compiler error:", 0) != 0;
    }
    const std::string_view file = line.substr(0, colon);
    if (file.find(".cpp") != std::string_view::npos || file.find(".h") != std::string_view::npos) return true;  // "x.cpp: In function"
  }
  return line.find("undefined reference to") != std::string_view::npos || line.find(": in function ") != std::string_view::npos ||
         line.find("multiple definition of") != std::string_view::npos;
}

}  // namespace

bool compile_failure_is_the_answers(const util::ProcessResult& r) {
  if (r.ok() || r.timed_out || r.exec_failed || r.term_signal != 0 || r.exit_code <= 0) return false;
  // The driver reports a killed or unstartable sub-process (cc1plus, as, ld) with a status of 1:
  // an out-of-memory kill, fork failing at RLIMIT_NPROC (which uid-65534 processes share), a full
  // disk. None of those says anything about the code. Only the compiler's own lines are read for
  // them: an honest answer whose failing line holds "out of memory" in a string is the answer's
  // failure (a red team's answers that quoted "fork:" were each compiled again, and kept in memory).
  std::string_view log(r.output);
  while (!log.empty()) {
    const size_t nl = log.find('\n');
    const std::string_view line = log.substr(0, nl);
    log = nl == std::string_view::npos ? std::string_view() : log.substr(nl + 1);
    if (answer_chosen_line(line)) continue;
    for (const char* host : {"Killed signal", "terminated signal", "cannot execute", "Resource temporarily unavailable",
                             "Cannot allocate memory", "virtual memory exhausted", "out of memory", "No space left",
                             "internal compiler error", "vfork", "fork:", "posix_spawn"})
      if (line.find(host) != std::string_view::npos) return false;
  }
  return r.output.find(": error:") != std::string::npos || r.output.find(": fatal error:") != std::string::npos ||
         r.output.find("undefined reference") != std::string::npos;
}

namespace {

std::string default_cache_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/leap-cpu-cache-" + std::to_string(getuid());
}

}  // namespace

std::string cpu_trampoline_source(const std::vector<std::string>& signatures) {
  std::string s =
      "// Generated by leap: calls a kernel with its launch-plan arguments in their real C types.\n"
      "#include <stdint.h>\n"
      "union LeapCpuArg { void* p; int64_t i; float f; double d; };\n";
  for (const auto& sig : signatures) {
    std::string params, call;
    for (size_t i = 0; i < sig.size(); ++i) {
      std::string sep = i ? ", " : "";
      std::string idx = std::to_string(i);
      switch (sig[i]) {
        case 'p': params += sep + "void*"; call += sep + "a[" + idx + "].p"; break;
        case 'i': params += sep + "int64_t"; call += sep + "a[" + idx + "].i"; break;
        case 'f': params += sep + "float"; call += sep + "a[" + idx + "].f"; break;
        case 'd': params += sep + "double"; call += sep + "a[" + idx + "].d"; break;
        default: throw Error("bad launch signature '" + sig + "'");
      }
    }
    s += "extern \"C\" void " + trampoline_name(sig) + "(void* fn, const LeapCpuArg* a) {\n"
         "  reinterpret_cast<void (*)(" + params + ")>(fn)(" + call + ");\n}\n";
  }
  return s;
}

CpuBackend::CpuBackend(CpuBackendOptions options) : options_(std::move(options)) {
  if (options_.cache_dir.empty()) options_.cache_dir = default_cache_dir();
  cache_ = std::make_unique<CompileCache>(options_.cache_dir, ".so");
}

CpuBackend::CpuBackend(CpuBackendOptions options, WorkerSide) : options_(std::move(options)), keep_loaded_(true) {}

LaunchLimits CpuBackend::limits() const {
  LaunchLimits l;
  l.max_scratch_bytes = options_.max_scratch_bytes;
  l.max_scratch_source = "the cpu backend's: 1 GiB, or env.worker_memory_mb when less";
  return l;
}

PlanParseOptions CpuBackend::plan_options() const {
  PlanParseOptions o;
  o.require_grid_block = false;
  return o;
}

namespace {

// What identifies a compiler binary within this process: its resolved path, size and change time
// (the same name after an upgrade is another compiler).
std::string compiler_identity(const std::string& compiler) {
  std::string id = compiler;
  const std::string path = find_program(compiler);
  struct stat st {};
  if (!path.empty() && stat(path.c_str(), &st) == 0) {
    std::error_code ec;
    id += '\0' + fs::canonical(path, ec).string() + '\0' + std::to_string(st.st_size) + '\0' +
          std::to_string(st.st_mtim.tv_sec) + '.' + std::to_string(st.st_mtim.tv_nsec);
  }
  return id;
}

}  // namespace

void CpuBackend::remember_host_failure(const std::string& key, const CompileOutcome& out) {
  const auto now = std::chrono::steady_clock::now();
  HostFailure f{out.feedback, out.log.substr(0, kMaxHostFailureLogBytes),
                now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(options_.host_failure_memory_s))};
  if (out.log.size() > kMaxHostFailureLogBytes) f.log += "\n[... the rest of the compiler's log not kept]";
  std::lock_guard<std::mutex> lock(timed_out_mutex_);
  // Expired entries go first (distinct answers are never looked up again), then all at the bound.
  for (auto it = host_failed_.begin(); it != host_failed_.end();) it = now >= it->second.until ? host_failed_.erase(it) : std::next(it);
  if (host_failed_.size() >= kMaxHostFailures) host_failed_.clear();
  host_failed_[key] = std::move(f);
}

const std::string& CpuBackend::compiler_version() {
  std::lock_guard<std::mutex> lock(version_mutex_);
  if (compiler_version_.empty()) {
    // Once per process and compiler binary, not per backend: `--version` is a fork of this
    // process, whose page tables are a trainer's gigabytes (about 100 ms a backend with the 2 GB
    // parent of bench/env_cpu, 7% of a pass of its cached evaluations).
    static std::mutex known_mutex;
    static std::map<std::string, std::string> known;
    const std::string id = compiler_identity(options_.compiler);
    std::lock_guard<std::mutex> known_lock(known_mutex);
    if (auto it = known.find(id); it != known.end()) {
      compiler_version_ = it->second;
    } else {
      util::ProcessOptions po;
      po.timeout_s = 30;
      auto r = util::run_process({options_.compiler, "--version"}, po);
      if (r.exec_failed || !r.ok())
        throw Error("the cpu backend's compiler '" + options_.compiler + "' does not run: " + r.output);
      compiler_version_ = r.output;
      known[id] = r.output;
    }
  }
  return compiler_version_;
}

CompileOutcome CpuBackend::compile(const std::string& code, const LaunchPlan& plan) {
  const std::string tramp = cpu_trampoline_source(plan.signatures());
  std::string keytext = code + '\0' + tramp + '\0' + options_.compiler + '\0';
  for (const auto& f : options_.flags) keytext += f + '\0';
  keytext += compiler_version();
  const std::string key = CompileCache::key_of(keytext);
  const fs::path dir(options_.cache_dir);
  const std::string header = "compilation failed:\n";

  CompileOutcome out;
  out.artifact.backend = name();
  out.artifact.key = key;
  auto key_lock = cache_->lock(key);  // an identical answer compiling now: wait, then hit
  if (CompileCache::Entry e = cache_->find(key); e.state == CompileCache::Entry::State::compiled) {
    out.ok = true;
    out.artifact.path = e.binary_path;
    out.artifact.exports = std::move(e.exports);
    out.artifact.from_cache = true;
    return out;
  } else if (e.state == CompileCache::Entry::State::failed) {
    out.log = std::move(e.log);
    out.feedback = compile_feedback(out.log, options_.feedback_errors, options_.feedback_chars, header);
    out.artifact.from_cache = true;
    return out;
  }

  {
    std::lock_guard<std::mutex> lock(timed_out_mutex_);
    if (auto it = timed_out_.find(key); it != timed_out_.end()) {
      out.timed_out = true;
      out.feedback = it->second;
      return out;
    }
    if (auto it = host_failed_.find(key); it != host_failed_.end()) {
      if (std::chrono::steady_clock::now() < it->second.until) {
        out.feedback = it->second.feedback;
        out.log = it->second.log;
        return out;
      }
      host_failed_.erase(it);
    }
  }

  std::string tmpl = (dir / "build-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw Error("cannot create a build directory in " + dir.string());
  const fs::path work(tmpl);
  struct Cleanup {
    fs::path p;
    ~Cleanup() { util::remove_tree(p); }
  } cleanup{work};
  write_file(work / "solution.cpp", code);
  write_file(work / "leap_trampolines.cpp", tramp);
  std::vector<std::string> argv{options_.compiler};
  argv.insert(argv.end(), options_.flags.begin(), options_.flags.end());
  argv.insert(argv.end(), {"solution.cpp", "leap_trampolines.cpp", "-o", "module.so"});
  ++compiler_runs_;
  util::ProcessOptions po;
  po.cwd = work.string();
  po.timeout_s = options_.compile_timeout_s;
  // A compiler installed outside /usr (say /opt/gcc-13/bin/g++) needs its prefix in the sandbox.
  std::vector<std::string> extra_ro;
  if (std::string c = find_program(options_.compiler); !c.empty()) {
    std::error_code ec;
    fs::path real = fs::canonical(c, ec);
    const fs::path prefix = real.parent_path().parent_path();
    if (!ec && real.string().rfind("/usr/", 0) != 0 && prefix.has_relative_path()) extra_ro.push_back(prefix.string());
  }
  auto r = run_tool(argv, work, po, options_.sandbox, extra_ro);
  out.seconds = r.wall_s;
  out.log = r.output;
  if (r.exec_failed) throw Error("cannot run the compiler '" + options_.compiler + "': " + r.output);
  if (r.timed_out) {
    out.timed_out = true;
    out.feedback = bound_text("compilation timed out after " + std::to_string(static_cast<int>(options_.compile_timeout_s)) +
                                  " s (the compiler was stopped)\n" + r.output,
                              options_.feedback_chars);
    // Not in the compile cache (a loaded machine may be the cause); remembered by this process,
    // so a repeat of the answer does not cost the time limit again.
    std::lock_guard<std::mutex> lock(timed_out_mutex_);
    if (timed_out_.size() >= kMaxTimedOutKeys) timed_out_.clear();
    timed_out_[key] = out.feedback;
    return out;
  }
  if (!r.ok()) {
    out.feedback = compile_feedback(out.log, options_.feedback_errors, options_.feedback_chars, header);
    // Cached only when it is the code's own failure: a kill, an out-of-memory or a fork failure
    // of the compiler is the host's, and the same answer compiled again may well build.
    if (compile_failure_is_the_answers(r)) {
      cache_->store_failed(key, out.log);
    } else if (options_.host_failure_memory_s > 0) {
      remember_host_failure(key, out);
    }
    return out;
  }
  // A module a worker could not load (its file-size limit: large initialised static data) is
  // the answer's own compile failure, cached as one, never a module in the cache (a red team
  // stored 200 MB a compile this way).
  std::error_code size_ec;
  const uintmax_t module_bytes = fs::file_size(work / "module.so", size_ec);
  if (!size_ec && module_bytes > kMaxModuleBytes) {
    out.log = "the compiled module is " + std::to_string(module_bytes >> 20) + " MB, more than the " +
              std::to_string(kMaxModuleBytes >> 20) + " MB a worker loads: large initialised static data? " +
              "(allocate it at run time, or use scratch)";
    out.feedback = bound_text(header + out.log, options_.feedback_chars);
    cache_->store_failed(key, out.log);
    return out;
  }
  auto names = list_exports(work, "module.so", options_.sandbox);
  out.ok = true;
  out.artifact.path = cache_->store_compiled(key, read_file(work / "module.so"), names);
  out.artifact.exports = std::move(names);
  return out;
}

namespace {

/// CLOCK_MONOTONIC in ms, read with the clock_gettime system call issued from leap's own code
/// (x86-64), not through libc or the vDSO, which code loaded into the worker rewrites most easily
/// (the sandbox also keeps it from filtering this call or trapping the TSC). Code that finds this
/// call site, or the caller's saved start time, can still forge a short call's time: docs/env.md
/// "Known limits". Elsewhere, libc's.
double monotonic_ms() {
  timespec ts{};
#if defined(__x86_64__)
  long ret;
  asm volatile("syscall"
               : "=a"(ret)
               : "0"(static_cast<long>(SYS_clock_gettime)), "D"(static_cast<long>(CLOCK_MONOTONIC)), "S"(&ts)
               : "rcx", "r11", "memory");
  (void)ret;
#else
  clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

/// Copies `bytes` from `src` to `dst` in leap's own code (x86-64: `rep movsb`), not through the
/// PLT's memcpy: code loaded into the worker that points leap's GOT entry for memcpy at a hook
/// could otherwise do its kernel's work in the snapshot copy, which the no-op's job pays too, and
/// so hide that work from the CPU-time bound (docs/env.md "Known limits"). Elsewhere, memcpy.
void copy_bytes(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(bytes) : : "memory");
#else
  std::memcpy(dst, src, bytes);
#endif
}

/// The cost of one monotonic_ms() read (the least of a few back-to-back pairs), in ms: taken off
/// each timed call, so the system call does not count against the candidate.
double monotonic_ms_cost() {
  double best = 1e9;
  for (int i = 0; i < 16; ++i) {
    const double a = monotonic_ms();
    const double b = monotonic_ms();
    best = std::min(best, b - a);
  }
  return std::max(0.0, best);
}

/// A no-op job's kernel and trampoline (RunRequest::noop): a call that returns at once, made as
/// the answer's calls are (through a trampoline, from run_launches).
[[gnu::noinline]] void noop_kernel() { asm volatile(""); }
void noop_trampoline(void* fn, const LeapCpuArg*) { reinterpret_cast<void (*)()>(fn)(); }

/// A launch resolved in the loaded code: the kernel, its signature's trampoline, and one argument
/// list per rotation of the input sets.
struct PreparedLaunch {
  void* fn;
  Trampoline tramp;
  std::vector<std::vector<LeapCpuArg>> args;
};

/// Resolves every launch of `plan` in `handle` (a launch_error in `out` and false when a kernel or
/// trampoline is missing) with its arguments bound to `tensors` for each of `n_rot` rotations.
/// A null `handle` (a no-op job) binds every launch to noop_kernel.
bool prepare_launches(void* handle, const BoundPlan& plan, const std::vector<void*>& tensors, const RunRequest& request,
                      size_t n_rot, std::vector<PreparedLaunch>& launches, RunOutcome& out) {
  auto tensor_ptr = [&](size_t rot, int t) -> void* {
    if (request.rotations.empty()) return tensors.at(static_cast<size_t>(t));
    return tensors.at(static_cast<size_t>(request.rotations[rot].at(static_cast<size_t>(t))));
  };
  for (size_t li = 0; li < plan.launches.size(); ++li) {
    const BoundLaunch& l = plan.launches[li];
    PreparedLaunch p{};
    p.fn = handle ? dlsym(handle, l.kernel.c_str()) : reinterpret_cast<void*>(&noop_kernel);
    if (!p.fn) {
      out.verdict = Verdict::launch_error;
      out.failed_launch = static_cast<int>(li);
      out.message = "launches[" + std::to_string(li) + "]: unknown kernel '" + l.kernel +
                    "': the compiled code has no extern \"C\" function of that name";
      return false;
    }
    p.tramp = handle ? reinterpret_cast<Trampoline>(dlsym(handle, trampoline_name(l.signature).c_str())) : &noop_trampoline;
    if (!p.tramp) {
      out.verdict = Verdict::launch_error;
      out.failed_launch = static_cast<int>(li);
      out.message = "internal: no trampoline for signature '" + l.signature + "'";
      return false;
    }
    p.args.resize(n_rot);
    for (size_t rot = 0; rot < n_rot; ++rot)
      for (const BoundArg& a : l.args) {
        LeapCpuArg v{};
        switch (a.kind) {
          case ArgKind::tensor: v.p = tensor_ptr(rot, a.tensor); break;
          case ArgKind::int64: v.i = a.i; break;
          case ArgKind::float32: v.f = static_cast<float>(a.f); break;
          case ArgKind::float64: v.d = a.f; break;
        }
        p.args[rot].push_back(v);
      }
    launches.push_back(std::move(p));
  }
  return true;
}

/// Before run `run` on rotation `rot` of a multi-run job (outside the timed region): the outputs
/// poisoned, the scratch zero-filled (as DESIGN.md promises an answer, every call), the inputs
/// rewritten at the run's secret positions, the perturbed inputs changed.
void prepare_run(const BoundPlan& plan, const std::vector<void*>& tensors, const RunRequest& request,
                 const std::vector<RewriteTarget>& targets, int run, size_t rot) {
  const size_t n_positions = request.rotations.empty() ? plan.tensors.size() : request.rotations[0].size();
  for (size_t i = 0; i < n_positions; ++i) {
    const size_t ti = rotated_tensor(request, rot, static_cast<int>(i));
    const BoundTensor& bt = plan.tensors.at(ti);
    if (bt.role == TensorRole::output) poison(tensors.at(ti), bt.bytes(), bt.dtype);
  }
  // Scratch is one buffer for every set; with parent_zeroes_scratch the parent zero-filled it
  // while this worker waited after the previous run (no CPU of this process's).
  for (size_t ti = 0; ti < plan.tensors.size() && !request.parent_zeroes_scratch; ++ti)
    if (plan.tensors[ti].role == TensorRole::scratch && plan.tensors[ti].bytes())
      std::memset(tensors.at(ti), 0, plan.tensors[ti].bytes());
  apply_rewrites(rewrites_for_run(request, targets, run), tensors);
  for (size_t k = 0; k < request.perturb_inputs.size(); ++k) {  // every element changes: no result of an earlier call stays useful
    const int p = request.perturb_inputs[k];
    const size_t ti = rotated_tensor(request, rot, p);
    perturb_input(request.rewrite_seed, run, p, plan.tensors.at(ti).dtype, tensors.at(ti),
                  static_cast<size_t>(plan.tensors.at(ti).numel()), request.perturb_bounds_of(k));
  }
}

/// One call of the launch sequence on rotation `rot`; its time in ms (the clock's own cost
/// `clock_cost` taken off), or -1 with a runtime_error in `out` when a launch threw.
double run_launches(const std::vector<PreparedLaunch>& launches, const BoundPlan& plan, size_t rot, double clock_cost,
                    std::atomic<int>* current_launch, RunOutcome& out) {
  const double start = monotonic_ms();
  for (size_t li = 0; li < launches.size(); ++li) {
    if (current_launch) current_launch->store(static_cast<int>(li));
    try {
      launches[li].tramp(launches[li].fn, launches[li].args[rot].data());
    } catch (const std::exception& e) {
      out.verdict = Verdict::runtime_error;
      out.failed_launch = static_cast<int>(li);
      out.message =
          "launches[" + std::to_string(li) + "] (" + plan.launches[li].kernel + ") threw an exception: " + e.what();
      return -1;
    } catch (...) {
      out.verdict = Verdict::runtime_error;
      out.failed_launch = static_cast<int>(li);
      out.message = "launches[" + std::to_string(li) + "] (" + plan.launches[li].kernel + ") threw an exception";
      return -1;
    }
  }
  return std::max(0.0, monotonic_ms() - start - clock_cost);
}

/// After run `run`: its outputs copied into the snapshot tensors when the run is a checked one.
void copy_run_snapshot(const BoundPlan& plan, const std::vector<void*>& tensors, const RunRequest& request, int run,
                       size_t rot) {
  if (const Snapshot* snap = snapshot_for_run(request, run))
    for (const auto& [position, dst] : snap->copies) {
      const size_t src = rotated_tensor(request, rot, position);
      copy_bytes(tensors.at(static_cast<size_t>(dst)), tensors.at(src), plan.tensors.at(src).bytes());
    }
}

}  // namespace

RunOutcome CpuBackend::execute(const Artifact& artifact, const BoundPlan& plan,
                               const std::vector<void*>& tensors, const RunRequest& request,
                               std::atomic<int>* current_launch) {
  RunOutcome out;
  // 1. The compiled code, loaded; every launch resolved in it. A no-op job loads none (its
  // launches call noop_kernel), so its worker has still run nothing of an answer's.
  void* handle = nullptr;
  if (!request.noop) {
    handle = dlopen(artifact.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      out.verdict = Verdict::launch_error;
      const char* e = dlerror();
      out.message = std::string("the compiled code could not be loaded: ") + (e ? e : "unknown error");
      return out;
    }
  }
  struct Closer {
    void* h;
    ~Closer() {
      if (h) dlclose(h);
    }
  } closer{keep_loaded_ ? nullptr : handle};
  if (handle) loaded_ = true;
  const size_t n_rot = std::max<size_t>(1, request.rotations.size());
  std::vector<PreparedLaunch> launches;
  if (!prepare_launches(handle, plan, tensors, request, n_rot, launches, out)) return out;

  // 2. The runs (env/timing_schedule.hpp). Outside the timed region: every run of a multi-run job
  // starts from poisoned outputs (code that skips work when its outputs already hold numbers
  // leaves NaN behind), its inputs are rewritten (a result cached between calls goes stale), and
  // the outputs of the runs the verifier checks are copied into their snapshots.
  const bool multi = std::max(0, request.warmup) + std::max(1, request.trials) > 1 || n_rot > 1;
  const std::vector<RewriteTarget> targets = rewrite_targets(plan, request);
  const double clock_cost = monotonic_ms_cost();
  RunHooks hooks;
  hooks.prepare = [&](int run, size_t rot) {
    if (multi) prepare_run(plan, tensors, request, targets, run, rot);
    return true;
  };
  hooks.timed = [&](int, size_t rot) { return run_launches(launches, plan, rot, clock_cost, current_launch, out); };
  // A sample drawn in the worker (RunRequest::worker_sample_slots) is for workers that run no
  // host code of the answer (cuda); the verifier never asks a cpu worker for one (the answer's
  // code could read it here), but the mechanism is the same, and the tests run it on the cpu.
  std::optional<RunSample> sample;
  if (request.worker_sample_slots > 0)
    sample.emplace(static_cast<size_t>(request.worker_sample_slots), request.rewrite_seed, request.worker_sample_outputs);
  hooks.after = [&](int run, size_t rot) {
    if (sample) {
      const int slot = sample->offer(run);
      const auto& outs = request.worker_sample_outputs;
      for (size_t j = 0; slot >= 0 && j < outs.size(); ++j) {
        const size_t src = rotated_tensor(request, rot, outs[j]);
        const size_t dst = static_cast<size_t>(request.worker_sample_first) + static_cast<size_t>(slot) * outs.size() + j;
        copy_bytes(tensors.at(dst), tensors.at(src), plan.tensors.at(src).bytes());
      }
    } else {
      copy_run_snapshot(plan, tensors, request, run, rot);
    }
    return !request.on_run_done || request.on_run_done(run);
  };
  const bool completed = run_timing_schedule(request, n_rot, hooks, out);
  if (sample) out.sampled_runs = sample->slot_runs();
  if (!completed) return out;
  if (current_launch) current_launch->store(-1);
  return out;
}

}  // namespace leap::env
