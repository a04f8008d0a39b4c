#include "env/cpu_backend.hpp"

#include <dlfcn.h>
#include <ftw.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "env/errors.hpp"
#include "env/poison.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
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

// 128-bit key from two FNV-1a passes with different seeds (a cache key, not a security hash).
std::string cache_key(const std::string& data) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx",
                static_cast<unsigned long long>(util::fnv1a64(data)),
                static_cast<unsigned long long>(util::fnv1a64(data, 0x84222325cbf29ce4ULL ^ data.size())));
  return buf;
}

// Recursive delete through nftw. Not std::filesystem::remove_all: libtorch.so exports its own
// std::filesystem operations, and its remove_all crashes when called from our binaries.
void remove_tree(const std::string& path) {
  nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        ::remove(p);
        return 0;  // keep going past a failure
      },
      16,
      FTW_DEPTH | FTW_PHYS);
}

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

// Writes `text` to `p` atomically (temp file + rename).
void write_file_atomic(const fs::path& p, const std::string& text) {
  static std::atomic<uint64_t> counter{0};
  fs::path tmp = p;  // unique per process, thread and call: concurrent compiles of one answer never share it
  tmp += ".tmp" + std::to_string(getpid()) + "-" + std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) +
         "-" + std::to_string(counter++);
  write_file(tmp, text);
  fs::rename(tmp, p);
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
  return bound_text(header + kept, max_chars);
}

std::set<std::string> read_exports(const std::string& text) {
  std::set<std::string> out;
  std::istringstream in(text);
  std::string name;
  while (in >> name) out.insert(name);
  return out;
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
  std::error_code ec;
  fs::create_directories(options_.cache_dir, ec);
  if (ec) throw Error("cannot create the compile cache " + options_.cache_dir + ": " + ec.message());
}

CpuBackend::CpuBackend(CpuBackendOptions options, WorkerSide) : options_(std::move(options)) {}

LaunchLimits CpuBackend::limits() const {
  LaunchLimits l;
  return l;
}

PlanParseOptions CpuBackend::plan_options() const {
  PlanParseOptions o;
  o.require_grid_block = false;
  return o;
}

const std::string& CpuBackend::compiler_version() {
  std::lock_guard<std::mutex> lock(version_mutex_);
  if (compiler_version_.empty()) {
    util::ProcessOptions po;
    po.timeout_s = 30;
    auto r = util::run_process({options_.compiler, "--version"}, po);
    if (r.exec_failed || !r.ok())
      throw Error("the cpu backend's compiler '" + options_.compiler + "' does not run: " + r.output);
    compiler_version_ = r.output;
  }
  return compiler_version_;
}

CompileOutcome CpuBackend::compile(const std::string& code, const LaunchPlan& plan) {
  const std::string tramp = cpu_trampoline_source(plan.signatures());
  std::string keytext = code + '\0' + tramp + '\0' + options_.compiler + '\0';
  for (const auto& f : options_.flags) keytext += f + '\0';
  keytext += compiler_version();
  const std::string key = cache_key(keytext);
  const fs::path dir(options_.cache_dir);
  const fs::path so = dir / (key + ".so");
  const fs::path exports = dir / (key + ".exports");
  const fs::path fail = dir / (key + ".fail");
  const std::string header = "compilation failed:\n";

  CompileOutcome out;
  out.artifact.backend = name();
  out.artifact.key = key;
  if (fs::exists(so) && fs::exists(exports)) {
    out.ok = true;
    out.artifact.path = so.string();
    out.artifact.exports = read_exports(read_file(exports));
    out.artifact.from_cache = true;
    return out;
  }
  if (fs::exists(fail)) {
    out.log = read_file(fail);
    out.feedback = compile_feedback(out.log, options_.feedback_errors, options_.feedback_chars, header);
    out.artifact.from_cache = true;
    return out;
  }

  std::string tmpl = (dir / "build-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) throw Error("cannot create a build directory in " + dir.string());
  const fs::path work(tmpl);
  struct Cleanup {
    fs::path p;
    ~Cleanup() { remove_tree(p.string()); }
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
    return out;  // not cached: a loaded machine may be the cause
  }
  if (!r.ok()) {
    out.feedback = compile_feedback(out.log, options_.feedback_errors, options_.feedback_chars, header);
    write_file_atomic(fail, out.log);
    return out;
  }
  auto names = list_exports(work, "module.so", options_.sandbox);
  std::string names_text;
  for (const auto& n : names) names_text += n + "\n";
  // Copied by this process, not renamed: the cache entry is then owned by leap's user (mode 0644),
  // not by the sandboxed compiler's uid, so no process of that uid can change it later.
  write_file_atomic(so, read_file(work / "module.so"));  // before the .exports file, which marks the entry complete
  write_file_atomic(exports, names_text);
  out.ok = true;
  out.artifact.path = so.string();
  out.artifact.exports = std::move(names);
  return out;
}

RunOutcome CpuBackend::execute(const Artifact& artifact, const BoundPlan& plan,
                               const std::vector<void*>& tensors, const RunRequest& request,
                               std::atomic<int>* current_launch) {
  RunOutcome out;
  void* handle = dlopen(artifact.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    out.verdict = Verdict::launch_error;
    const char* e = dlerror();
    out.message = std::string("the compiled code could not be loaded: ") + (e ? e : "unknown error");
    return out;
  }
  struct Closer {
    void* h;
    ~Closer() { dlclose(h); }
  } closer{handle};

  struct Prepared {
    void* fn;
    Trampoline tramp;
    std::vector<std::vector<LeapCpuArg>> args;  // one argument list per rotation
  };
  const size_t n_rot = std::max<size_t>(1, request.rotations.size());
  auto tensor_ptr = [&](size_t rot, int t) -> void* {
    if (request.rotations.empty()) return tensors.at(static_cast<size_t>(t));
    return tensors.at(static_cast<size_t>(request.rotations[rot].at(static_cast<size_t>(t))));
  };
  std::vector<Prepared> launches;
  for (size_t li = 0; li < plan.launches.size(); ++li) {
    const BoundLaunch& l = plan.launches[li];
    Prepared p{};
    p.fn = dlsym(handle, l.kernel.c_str());
    if (!p.fn) {
      out.verdict = Verdict::launch_error;
      out.failed_launch = static_cast<int>(li);
      out.message = "launches[" + std::to_string(li) + "]: unknown kernel '" + l.kernel +
                    "': the compiled code has no extern \"C\" function of that name";
      return out;
    }
    p.tramp = reinterpret_cast<Trampoline>(dlsym(handle, trampoline_name(l.signature).c_str()));
    if (!p.tramp) {
      out.verdict = Verdict::launch_error;
      out.failed_launch = static_cast<int>(li);
      out.message = "internal: no trampoline for signature '" + l.signature + "'";
      return out;
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

  using Clock = std::chrono::steady_clock;
  const int warmup = std::max(0, request.warmup);
  // Every input set runs at least once, even when warm-up + trials < sets: the verifier checks
  // each set's outputs after the timing loop.
  const int total = std::max(warmup + std::max(1, request.trials), static_cast<int>(n_rot));
  const size_t n_tensors = request.rotations.empty() ? plan.tensors.size() : request.rotations[0].size();
  const auto job_start = Clock::now();
  auto elapsed_s = [&] { return std::chrono::duration<double>(Clock::now() - job_start).count(); };
  for (int t = 0; t < total; ++t) {
    if (request.max_seconds > 0 && static_cast<size_t>(t) >= n_rot) {  // every set runs at least once
      if (t < warmup && elapsed_s() > request.max_seconds / 2) t = warmup;  // skip the rest of warm-up
      if (t > warmup && elapsed_s() > request.max_seconds) break;           // time box spent
    }
    const size_t rot = static_cast<size_t>(t) % n_rot;
    // Every run starts from poisoned outputs (outside the timed region), so code that skips work
    // when its outputs already hold numbers leaves NaN behind, which the verifier's check of every
    // input set after the loop sees (wrong_output).
    if (total > 1)
      for (size_t i = 0; i < n_tensors; ++i) {
        const size_t buf_index = request.rotations.empty() ? i : static_cast<size_t>(request.rotations[rot].at(i));
        const BoundTensor& bt = plan.tensors.at(buf_index);
        if (bt.role == TensorRole::output) poison(tensors.at(buf_index), bt.bytes(), bt.dtype);
      }
    auto start = Clock::now();
    for (size_t li = 0; li < launches.size(); ++li) {
      if (current_launch) current_launch->store(static_cast<int>(li));
      try {
        launches[li].tramp(launches[li].fn, launches[li].args[rot].data());
      } catch (const std::exception& e) {
        out.verdict = Verdict::runtime_error;
        out.failed_launch = static_cast<int>(li);
        out.message = "launches[" + std::to_string(li) + "] (" + plan.launches[li].kernel +
                      ") threw an exception: " + e.what();
        return out;
      } catch (...) {
        out.verdict = Verdict::runtime_error;
        out.failed_launch = static_cast<int>(li);
        out.message = "launches[" + std::to_string(li) + "] (" + plan.launches[li].kernel + ") threw an exception";
        return out;
      }
    }
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    if (t >= warmup) out.times_ms.push_back(ms);
  }
  if (current_launch) current_launch->store(-1);
  return out;
}

}  // namespace leap::env
