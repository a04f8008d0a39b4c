#pragma once
// Compiling a solution's ```cuda block to CUBIN with NVRTC, in-process, with an on-disk cache.
//
// NVRTC runs no generated code, so it runs in the parent (any thread; NVRTC is thread-safe for
// distinct programs) and needs no GPU and no driver. Options: `--gpu-architecture=sm_XX` (a real
// architecture, so the result is CUBIN, loadable by a driver older than NVRTC), `-std=c++17`, and
// one include folder holding only the headers NVRTC is meant to see (cuda_fp16.h, cuda_bf16.h,
// cuda_fp8.h and their helpers; see nvrtc_include_dir). No relocatable device code, no device
// runtime: generated code cannot start work on other streams.
//
// Time limit: nvrtcCompileProgram cannot be interrupted. compile() runs it on a detached thread
// and stops waiting at `timeout_s`: the candidate gets a compile_error ("timed out"), the thread
// finishes in the background (its CPU time is lost, its result dropped). At most
// `max_abandoned` such threads may be running; past that compile() throws leap::Error (the
// machine is overloaded or NVRTC is stuck), which stops the run instead of piling up threads.
#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <memory>
#include <string>
#include <vector>

#include "env/compile_cache.hpp"

namespace leap::env {

/// Settings of an NvrtcCompiler.
struct NvrtcOptions {
  std::string arch = "sm_90";       ///< real target architecture, "sm_XX" (CUBIN, never PTX)
  std::string cache_dir;            ///< compiled CUBINs; empty = $TMPDIR/leap-cuda-cache-<uid>
  std::vector<std::string> extra_options;  ///< more NVRTC options (part of the cache key)
  double timeout_s = 60;            ///< give up waiting for NVRTC after this many seconds (<= 0: wait)
  int max_abandoned = 4;            ///< timed-out compiles still running before compile() throws
  size_t feedback_chars = 2000;     ///< bound on compile feedback, characters
  int feedback_errors = 5;          ///< NVRTC errors kept in the feedback
};

/// Result of NvrtcCompiler::compile.
struct NvrtcResult {
  bool ok = false;
  std::string cubin_path;          ///< the CUBIN in the cache (when ok)
  std::set<std::string> exports;   ///< global functions (kernels) of the CUBIN (when ok)
  std::string key;                 ///< cache key (32 hex digits)
  std::string log;                 ///< NVRTC's full log (warnings too)
  std::string feedback;            ///< for the model when !ok: first errors with line numbers
  bool from_cache = false;         ///< true if NVRTC did not run for this request
  bool timed_out = false;          ///< NVRTC was still running at timeout_s
  double seconds = 0;              ///< wall time of the compile (0 for a cache hit)
};

/// "MAJOR.MINOR" of the linked NVRTC, or "" when this build has no NVRTC.
std::string nvrtc_version();

/// Real architectures NVRTC can target, as compute capabilities times ten (75, 80, 90, ...).
std::vector<int> nvrtc_supported_archs();

/// The NVRTC target for a GPU of compute capability `cc_major`.`cc_minor`: the architecture-
/// specific variant "sm_XXa" from Hopper on (cc >= 9.0: sm_90a, sm_100a, sm_120a, ...), so that
/// wgmma, setmaxnreg and the other arch-specific instructions can be used (a CUBIN built for it
/// loads only on that exact architecture, which is the GPU it is built for); "sm_XX" before.
std::string nvrtc_arch_for(int cc_major, int cc_minor);

/// Names of the kernel entry points in an ELF image (a CUBIN): global functions that carry
/// NVIDIA's STO_CUDA_ENTRY mark (device helpers do not). Throws leap::Error
/// if `elf` is not a 64-bit little-endian ELF file or its section table is out of bounds.
std::set<std::string> cubin_kernel_names(const std::string& elf);

/// True if `bytes` starts with the ELF magic number (0x7f 'E' 'L' 'F').
bool is_elf(const std::string& bytes);

/// The folder NVRTC gets as its only include path: links to the whitelisted toolkit headers
/// (cuda_fp16/bf16/fp8/fp6/fp4 .h/.hpp, vector_types.h, vector_functions.h/.hpp, nv/) under
/// `<cache_dir>/nvrtc-include-<version>`, created on first use. Throws leap::Error if the
/// toolkit's include folder (LEAP_CUDA_HOME/include) lacks cuda_fp16.h or the folder cannot be made.
std::string nvrtc_include_dir(const std::string& cache_dir);

/// NVRTC front end with a compile cache (env/compile_cache.hpp) keyed by the SHA-256 of the
/// source, the options (arch included) and the NVRTC version. Thread-safe.
class NvrtcCompiler {
 public:
  /// Creates the cache folder. Throws leap::Error if it cannot, or if this build has no NVRTC.
  explicit NvrtcCompiler(NvrtcOptions options = {});

  /// Compiles `code` (the ```cuda block body; its line 1 is the program's line 1). A failure of
  /// the code is reported in the result (failures are cached too; timeouts are not); a broken
  /// toolchain (NVRTC out of memory, invalid option) or too many abandoned compiles throw leap::Error.
  NvrtcResult compile(const std::string& code);

  /// The NVRTC options used (without the include folder's path).
  std::vector<std::string> options() const;
  /// How many times NVRTC actually ran (cache misses).
  int compiler_runs() const { return compiler_runs_.load(); }
  /// Timed-out compiles whose thread is still running.
  int abandoned_running() const;
  const NvrtcOptions& settings() const { return options_; }

 private:
  NvrtcOptions options_;
  std::unique_ptr<CompileCache> cache_;
  std::string include_dir_;
  std::atomic<int> compiler_runs_{0};
};

}  // namespace leap::env
