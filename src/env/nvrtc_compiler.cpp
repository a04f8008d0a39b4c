#include "env/nvrtc_compiler.hpp"

#include <elf.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>

#include "env/verdict.hpp"
#include "util/error.hpp"

#if LEAP_HAVE_NVRTC
#include <nvrtc.h>
#endif

namespace leap::env {

namespace fs = std::filesystem;

namespace {

std::atomic<int> g_abandoned{0};  // timed-out compile threads still running (process-wide)

// The first `max_errors` errors of an NVRTC log, each with the source line and caret NVRTC prints
// under it. NVRTC writes `solution.cu(LINE): error: ...` (or `catastrophic error`); warnings are
// skipped unless the log has no error line at all.
std::string nvrtc_feedback(const std::string& log, int max_errors, size_t max_chars) {
  std::istringstream in(log);
  std::string line, kept;
  int errors = 0;
  bool keeping = false;
  while (std::getline(in, line)) {
    const bool located = line.rfind("solution.cu(", 0) == 0;
    const bool is_error = located && line.find("error") != std::string::npos &&
                          line.find("warning") == std::string::npos;
    if (located) {
      keeping = is_error && errors < max_errors;
      if (is_error) ++errors;
      if (errors > max_errors) break;
    } else if (line.find("detected in the compilation of") != std::string::npos) {
      keeping = false;
    }
    if (keeping && !line.empty()) kept += line + "\n";
  }
  if (errors == 0) kept = log.empty() ? "NVRTC failed without a message\n" : log;
  return bound_text("compilation failed (NVRTC):\n" + kept, max_chars);
}

std::string default_cache_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp && *tmp ? tmp : "/tmp") + "/leap-cuda-cache-" + std::to_string(getuid());
}

}  // namespace

bool is_elf(const std::string& bytes) { return bytes.size() >= 4 && std::memcmp(bytes.data(), ELFMAG, SELFMAG) == 0; }

std::set<std::string> cubin_kernel_names(const std::string& elf) {
  if (!is_elf(elf) || elf.size() < sizeof(Elf64_Ehdr)) throw Error("not an ELF image");
  Elf64_Ehdr eh;
  std::memcpy(&eh, elf.data(), sizeof eh);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB)
    throw Error("not a 64-bit little-endian ELF image");
  auto section = [&](size_t i) {
    Elf64_Shdr sh;
    size_t off = eh.e_shoff + i * sizeof(Elf64_Shdr);
    if (eh.e_shentsize != sizeof(Elf64_Shdr) || off + sizeof sh > elf.size()) throw Error("ELF section table out of bounds");
    std::memcpy(&sh, elf.data() + off, sizeof sh);
    if (sh.sh_type != SHT_NOBITS && sh.sh_offset + sh.sh_size > elf.size()) throw Error("ELF section out of bounds");
    return sh;
  };
  std::set<std::string> out;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    Elf64_Shdr sh = section(i);
    if (sh.sh_type != SHT_SYMTAB || sh.sh_entsize != sizeof(Elf64_Sym)) continue;
    Elf64_Shdr str = section(sh.sh_link);
    for (size_t k = 0; k < sh.sh_size / sizeof(Elf64_Sym); ++k) {
      Elf64_Sym sym;
      std::memcpy(&sym, elf.data() + sh.sh_offset + k * sizeof sym, sizeof sym);
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC) continue;
      // NVIDIA marks kernel entry points with STO_CUDA_ENTRY (0x10) in st_other; global or weak
      // functions without it are device helpers (e.g. $__internal_..._div_u64 slow paths).
      constexpr unsigned char kStoCudaEntry = 0x10;
      if (ELF64_ST_BIND(sym.st_info) != STB_GLOBAL || !(sym.st_other & kStoCudaEntry)) continue;
      if (sym.st_shndx == SHN_UNDEF || sym.st_name >= str.sh_size) continue;
      const char* name = elf.data() + str.sh_offset + sym.st_name;
      out.insert(std::string(name, strnlen(name, str.sh_size - sym.st_name)));
    }
  }
  return out;
}

std::string nvrtc_version() {
#if LEAP_HAVE_NVRTC
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return "";
  return std::to_string(major) + "." + std::to_string(minor);
#else
  return "";
#endif
}

std::vector<int> nvrtc_supported_archs() {
  std::vector<int> out;
#if LEAP_HAVE_NVRTC
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return out;
  out.resize(static_cast<size_t>(n));
  if (nvrtcGetSupportedArchs(out.data()) != NVRTC_SUCCESS) out.clear();
#endif
  return out;
}

std::string nvrtc_arch_for(int cc_major, int cc_minor) {
  const int cc = cc_major * 10 + cc_minor;
  return "sm_" + std::to_string(cc) + (cc >= 90 ? "a" : "");
}

std::string nvrtc_include_dir(const std::string& cache_dir) {
#ifndef LEAP_CUDA_HOME
#define LEAP_CUDA_HOME "/usr/local/cuda"
#endif
  const fs::path src = fs::path(LEAP_CUDA_HOME) / "include";
  if (!fs::exists(src / "cuda_fp16.h"))
    throw Error("the CUDA toolkit headers are missing: no cuda_fp16.h in " + src.string());
  const fs::path dir = fs::path(cache_dir) / ("nvrtc-include-" + nvrtc_version());
  static const char* kHeaders[] = {"cuda_fp16.h", "cuda_fp16.hpp", "cuda_bf16.h",  "cuda_bf16.hpp",
                                   "cuda_fp8.h",  "cuda_fp8.hpp",  "cuda_fp6.h",   "cuda_fp6.hpp",
                                   "cuda_fp4.h",  "cuda_fp4.hpp",  "vector_types.h", "vector_functions.h",
                                   "vector_functions.hpp", "nv"};
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create " + dir.string() + ": " + ec.message());
  for (const char* h : kHeaders) {
    fs::path link = dir / h;
    if (!fs::exists(src / h) || fs::is_symlink(link)) continue;
    fs::create_symlink(src / h, link, ec);  // a concurrent creator may win: fine
  }
  return dir.string();
}

NvrtcCompiler::NvrtcCompiler(NvrtcOptions options) : options_(std::move(options)) {
#if !LEAP_HAVE_NVRTC
  throw Error("this build of leap has no NVRTC (the CUDA toolkit was not found at build time)");
#endif
  if (options_.cache_dir.empty()) options_.cache_dir = default_cache_dir();
  cache_ = std::make_unique<CompileCache>(options_.cache_dir, ".cubin");
  if (options_.arch.rfind("sm_", 0) != 0)
    throw Error("env.cuda.arch must be a real architecture such as sm_90 (CUBIN, not PTX), not '" + options_.arch + "'");
  include_dir_ = nvrtc_include_dir(options_.cache_dir);
}

std::vector<std::string> NvrtcCompiler::options() const {
  std::vector<std::string> o{"--gpu-architecture=" + options_.arch, "-std=c++17"};
  o.insert(o.end(), options_.extra_options.begin(), options_.extra_options.end());
  return o;
}

int NvrtcCompiler::abandoned_running() const { return g_abandoned.load(); }

#if LEAP_HAVE_NVRTC
namespace {

// One NVRTC run, shared between the caller and the (possibly abandoned) compile thread.
struct CompileJob {
  std::string code;
  std::vector<std::string> options;
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
  bool abandoned = false;
  nvrtcResult result = NVRTC_SUCCESS;
  std::string stage;  // which call failed, for toolchain errors
  std::string log, cubin;

  void run() {
    nvrtcProgram prog = nullptr;
    nvrtcResult r = nvrtcCreateProgram(&prog, code.c_str(), "solution.cu", 0, nullptr, nullptr);
    std::string st = "nvrtcCreateProgram", lg, bin;
    if (r == NVRTC_SUCCESS) {
      std::vector<const char*> argv;
      for (const auto& o : options) argv.push_back(o.c_str());
      st = "nvrtcCompileProgram";
      r = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
      size_t n = 0;
      if (nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && n > 1) {
        lg.resize(n);
        if (nvrtcGetProgramLog(prog, lg.data()) == NVRTC_SUCCESS) lg.resize(n - 1);
      }
      if (r == NVRTC_SUCCESS) {
        st = "nvrtcGetCUBIN";
        r = nvrtcGetCUBINSize(prog, &n);
        if (r == NVRTC_SUCCESS) {
          bin.resize(n);
          r = nvrtcGetCUBIN(prog, bin.data());
        }
      }
      nvrtcDestroyProgram(&prog);
    }
    std::lock_guard<std::mutex> lock(mutex);
    result = r;
    stage = st;
    log = std::move(lg);
    cubin = std::move(bin);
    done = true;
    if (abandoned) --g_abandoned;
    cv.notify_all();
  }
};

}  // namespace
#endif

NvrtcResult NvrtcCompiler::compile(const std::string& code) {
  NvrtcResult out;
#if LEAP_HAVE_NVRTC
  const std::vector<std::string> opts = options();
  std::string keytext = code + '\0' + nvrtc_version() + '\0';
  for (const auto& o : opts) keytext += o + '\0';
  out.key = CompileCache::key_of(keytext);
  auto key_lock = cache_->lock(out.key);  // an identical answer compiling now: wait, then hit
  if (CompileCache::Entry e = cache_->find(out.key); e.state == CompileCache::Entry::State::compiled) {
    out.ok = true;
    out.from_cache = true;
    out.cubin_path = e.binary_path;
    out.exports = std::move(e.exports);
    return out;
  } else if (e.state == CompileCache::Entry::State::failed) {
    out.from_cache = true;
    out.log = std::move(e.log);
    out.feedback = nvrtc_feedback(out.log, options_.feedback_errors, options_.feedback_chars);
    return out;
  }
  if (options_.timeout_s > 0 && g_abandoned.load() >= options_.max_abandoned)
    throw Error(std::to_string(g_abandoned.load()) +
                " timed-out NVRTC compiles are still running; the machine is overloaded or NVRTC is stuck");

  auto job = std::make_shared<CompileJob>();
  job->code = code;
  job->options = opts;
  job->options.push_back("--include-path=" + include_dir_);
  ++compiler_runs_;
  const auto start = std::chrono::steady_clock::now();
  std::thread([job] { job->run(); }).detach();
  {
    std::unique_lock<std::mutex> lock(job->mutex);
    if (options_.timeout_s > 0) {
      auto limit = std::chrono::duration<double>(options_.timeout_s);
      if (!job->cv.wait_for(lock, limit, [&] { return job->done; })) {
        job->abandoned = true;
        ++g_abandoned;
        out.timed_out = true;
        out.seconds = options_.timeout_s;
        char secs[32];
        std::snprintf(secs, sizeof secs, "%g", options_.timeout_s);
        out.feedback = bound_text(std::string("compilation timed out: NVRTC did not finish within ") + secs +
                                      " s (heavy template or unrolling work?)\n",
                                  options_.feedback_chars);
        return out;  // not cached: a loaded machine may be the cause
      }
    } else {
      job->cv.wait(lock, [&] { return job->done; });
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.log = job->log;
  if (job->result == NVRTC_ERROR_COMPILATION) {
    out.feedback = nvrtc_feedback(out.log, options_.feedback_errors, options_.feedback_chars);
    cache_->store_failed(out.key, out.log);
    return out;
  }
  if (job->result != NVRTC_SUCCESS)
    throw Error(job->stage + " failed: " + nvrtcGetErrorString(job->result) + (out.log.empty() ? "" : "\n" + out.log));
  if (!is_elf(job->cubin)) throw Error("NVRTC returned a CUBIN that is not an ELF image");
  out.exports = cubin_kernel_names(job->cubin);
  out.cubin_path = cache_->store_compiled(out.key, job->cubin, out.exports);
  out.ok = true;
#else
  (void)code;
  throw Error("this build of leap has no NVRTC");
#endif
  return out;
}

}  // namespace leap::env
