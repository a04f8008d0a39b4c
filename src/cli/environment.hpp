#pragma once
// Building the kernel environment (backend, worker pool, verifier) from an experiment's `env:`.
#include <memory>
#include <string>
#include <vector>

#include "config/experiment.hpp"
#include "env/verifier.hpp"

namespace leap::cli {

/// A ready environment for one backend.
struct Environment {
  std::shared_ptr<env::Backend> backend;
  std::shared_ptr<env::WorkerPool> pool;
  std::unique_ptr<env::Verifier> verifier;
  std::string cache_dir;  ///< compile cache in use
  bool temp_cache = false;  ///< cache_dir is a temporary folder (env.compile_cache: false)
  ~Environment();
};

/// Verifier settings from `env:` (seeds, timing, threads, feedback bound).
env::VerifierOptions verifier_options(const config::EnvConfig& env);

/// `env` with an empty `cache_dir` set to `<results_dir>/cache` (the `--results-dir` of the
/// command); a set one is kept. The config itself is not changed, so a run stores what was given.
config::EnvConfig with_cache_root(config::EnvConfig env, const std::string& results_dir);

/// Builds the environment for `backend` ("cpu" or "cuda"; the cache folder is
/// `env.cache_dir/<backend>`; an empty env.cache_dir stands for results/cache: the CLI passes
/// with_cache_root's). With env.compile_cache false, a fresh temporary cache folder is used
/// and removed with the Environment. "cuda" throws env::CudaUnavailableError (exit 1, "the cuda
/// backend needs an NVIDIA GPU and its driver: ...") on a machine without a usable GPU, and
/// NotBuiltError in a build without NVRTC; an unknown name throws UsageError. The cuda
/// backend's workers use GPU 0.
std::unique_ptr<Environment> make_environment(const config::EnvConfig& env, const std::string& backend);
/// make_environment with the cuda backend's workers on GPU `cuda_device` (a data-parallel rank
/// passes its LOCAL_RANK); the cpu backend ignores it.
std::unique_ptr<Environment> make_environment(const config::EnvConfig& env, const std::string& backend,
                                              int cuda_device);

/// Compiles a known-good kernel with `environment`'s backend (a cache hit after the first time):
/// settings under which nothing compiles (env.cpu.flags without -shared, a bogus flag, a missing
/// env.cpu.compiler, a wrong env.cuda.arch) are the config's fault, not every answer's. Throws
/// ConfigError (exit 2) naming the keys and the compiler's first errors; a compile that timed out
/// (a loaded host) is not judged.
void check_compiler(const Environment& environment, const std::string& backend);

/// The cuda backend alone, compiling into `cache_dir`. With `require_device` false it works
/// without a GPU for compiling only (NVRTC targets env.cuda.arch); see env::CudaBackendOptions.
/// Throws NotBuiltError in a build without NVRTC.
std::shared_ptr<env::Backend> make_cuda_backend(const config::EnvConfig& env, const std::string& cache_dir,
                                                bool require_device);
/// make_cuda_backend on GPU ordinal `device`.
std::shared_ptr<env::Backend> make_cuda_backend(const config::EnvConfig& env, const std::string& cache_dir,
                                                bool require_device, int device);

}  // namespace leap::cli

namespace leap::cli {

/// One answer file to grade.
struct GradeJob {
  const env::RuntimeTask* task = nullptr;
  std::string file;    ///< path of the answer (.md)
  std::string answer;  ///< its text
};

/// Grades `jobs` with `threads` concurrent evaluations (results in job order).
std::vector<env::EvalResult> grade_all(env::Verifier& verifier, const std::vector<GradeJob>& jobs, int threads);

/// The experiment from `--config` (or the defaults) with `--set` overrides applied and validated.
config::Experiment experiment_from_flags(const std::string& config_path, const std::vector<std::string>& sets);

}  // namespace leap::cli
