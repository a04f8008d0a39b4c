#include "cli/environment.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "env/cpu_backend.hpp"
#include "env/sandbox.hpp"
#include "env/reference.hpp"
#if LEAP_HAVE_NVRTC
#include "env/cuda_backend.hpp"
#endif
#include "rl/grader.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"

namespace leap::cli {

Environment::~Environment() {
  verifier.reset();
  pool.reset();
  if (temp_cache && !cache_dir.empty()) util::remove_tree(cache_dir);  // no shell: the path is outside text
}

config::EnvConfig with_cache_root(config::EnvConfig env, const std::string& results_dir) {
  if (env.cache_dir.empty()) env.cache_dir = (std::filesystem::path(results_dir) / "cache").string();
  return env;
}

env::VerifierOptions verifier_options(const config::EnvConfig& e) {
  env::VerifierOptions o;
  o.seeds = static_cast<int>(e.seeds);
  o.warmup = static_cast<int>(e.timing.warmup);
  o.trials = static_cast<int>(e.timing.trials);
  o.max_seconds = e.timing.max_seconds;
  o.suspicious_speedup = e.timing.suspicious_speedup;
  o.checked_runs = static_cast<int>(e.timing.checked_runs);
  o.warmup_ms = e.timing.warmup_ms;
  o.min_timed_ms = e.timing.min_timed_ms;
  o.threads = static_cast<int>(e.cpu.threads);
  o.feedback_max_chars = static_cast<size_t>(e.feedback_max_chars);
  o.profile_feedback = e.profile_feedback;
  o.peak_gb_s = e.backend == "cuda" ? e.cuda.peak_gb_s : e.cpu.peak_gb_s;
  o.peak_name = e.backend == "cuda" ? "GPU copy bandwidth (env.cuda.peak_gb_s)" : "single-core reference bandwidth";
  return o;
}

namespace {

// The compile cache folder for `backend` (a temporary one when env.compile_cache is off).
void set_cache_dir(Environment& out, const config::EnvConfig& e, const std::string& backend) {
  if (e.compile_cache) {
    out.cache_dir = (std::filesystem::path(with_cache_root(e, "results").cache_dir) / backend).string();
  } else {
    std::string t = (std::filesystem::temp_directory_path() / "leap-nocache-XXXXXX").string();
    if (!mkdtemp(t.data())) throw Error("cannot create a temporary compile folder");
    out.cache_dir = t;
    out.temp_cache = true;
  }
  std::filesystem::create_directories(out.cache_dir);
  // Absolute: the pool passes a module to its workers as an open file, but every message and
  // every process that reads the cache (a cuda worker sees the host tree from another cwd) needs
  // a path that does not depend on the working folder.
  out.cache_dir = std::filesystem::absolute(out.cache_dir).lexically_normal().string();
}

std::shared_ptr<env::Backend> make_cpu_backend(const config::EnvConfig& e, const std::string& cache_dir) {
  env::CpuBackendOptions co;
  co.compiler = e.cpu.compiler;
  co.flags.clear();
  std::istringstream in(e.cpu.flags);
  for (std::string f; in >> f;) co.flags.push_back(f);
  bool has_no_undef = false;
  for (const auto& f : co.flags) has_no_undef = has_no_undef || f == "-Wl,--no-undefined";
  if (!has_no_undef) co.flags.push_back("-Wl,--no-undefined");
  co.compile_timeout_s = e.compile_timeout_s;
  co.feedback_chars = static_cast<size_t>(e.feedback_max_chars);
  co.cache_dir = cache_dir;
  co.sandbox = env::sandbox_mode_from_string(e.sandbox);
  co.max_scratch_bytes = std::min(env::kMaxCpuScratchBytes, env::resolved_memory_mb(e.worker_memory_mb) << 20);
  return std::make_shared<env::CpuBackend>(co);
}

}  // namespace

std::shared_ptr<env::Backend> make_cuda_backend(const config::EnvConfig& e, const std::string& cache_dir,
                                                bool require_device) {
  return make_cuda_backend(e, cache_dir, require_device, 0);
}

std::shared_ptr<env::Backend> make_cuda_backend(const config::EnvConfig& e, const std::string& cache_dir,
                                                bool require_device, int device) {
#if LEAP_HAVE_NVRTC
  env::CudaBackendOptions co;
  co.device = device;
  co.nvrtc.arch = e.cuda.arch;
  co.nvrtc.cache_dir = cache_dir;
  co.nvrtc.timeout_s = e.compile_timeout_s;
  co.nvrtc.feedback_chars = static_cast<size_t>(e.feedback_max_chars);
  co.require_device = require_device;
  return std::make_shared<env::CudaBackend>(co);
#else
  (void)e;
  (void)cache_dir;
  (void)require_device;
  (void)device;
  throw NotBuiltError("the cuda backend is not in this build (no CUDA toolkit / NVRTC at build time)");
#endif
}

void check_compiler(const Environment& environment, const std::string& backend) {
  const env::LaunchPlan plan;  // no launches: the code alone
  const std::string code =
      backend == "cuda"
          ? "extern \"C\" __global__ void leap_probe(float* y, long long n) {\n"
            "  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n  if (i < n) y[i] = 0.0f;\n}\n"
          : "#include <cstdint>\nextern \"C\" void leap_probe(float* y, int64_t n) {\n"
            "  for (int64_t i = 0; i < n; ++i) y[i] = 0.0f;\n}\n";
  const env::CompileOutcome c = environment.backend->compile(code, plan);
  if (c.ok || c.timed_out) return;
  std::string why = c.feedback.empty() ? c.log : c.feedback;
  if (why.size() > 800) why = why.substr(0, 800) + " ...";
  throw ConfigError(std::string(backend == "cuda" ? "env.cuda.arch" : "env.cpu.compiler / env.cpu.flags") +
                    ": a known-good kernel does not compile with these settings, so every answer would be a "
                    "compile_error; the compiler said:\n" + why);
}

std::unique_ptr<Environment> make_environment(const config::EnvConfig& e, const std::string& backend) {
  return make_environment(e, backend, 0);
}

std::unique_ptr<Environment> make_environment(const config::EnvConfig& e, const std::string& backend,
                                              int cuda_device) {
  if (backend != "cpu" && backend != "cuda")
    throw UsageError("unknown backend '" + backend + "' (cpu or cuda)");
  auto out = std::make_unique<Environment>();
  env::set_reference_time_limit(e.reference_timeout_s);
  set_cache_dir(*out, e, backend);
  out->backend = backend == "cpu" ? make_cpu_backend(e, out->cache_dir) : make_cuda_backend(e, out->cache_dir, true, cuda_device);
  env::PoolOptions po;
  po.workers = static_cast<int>(std::max<int64_t>(1, e.workers));
  po.run_timeout_s = e.run_timeout_s;
  po.cpu_time_limit = backend == "cpu";  // cpu candidates: CPU time, so load cannot fake a timeout
  po.sandbox.mode = env::sandbox_mode_from_string(e.sandbox);
  po.sandbox.memory_mb = e.worker_memory_mb;
  // cuda candidates are device code only (no host code runs in the worker), so a worker keeps
  // its CUDA context across jobs instead of paying cuInit per job; a fault that poisons the
  // context still ends the worker (Backend::worker_must_exit).
  if (backend == "cuda") po.max_jobs_per_worker = 64;
  out->pool = std::make_shared<env::WorkerPool>(out->backend, po);
  env::VerifierOptions vo = verifier_options(e);
  vo.peak_gb_s = backend == "cuda" ? e.cuda.peak_gb_s : e.cpu.peak_gb_s;  // the backend run, not env.backend
  vo.peak_name = backend == "cuda" ? "GPU copy bandwidth (env.cuda.peak_gb_s)" : "single-core reference bandwidth";
  out->verifier = std::make_unique<env::Verifier>(out->backend, out->pool, vo);
  return out;
}

}  // namespace leap::cli


#include "config/load.hpp"

namespace leap::cli {

std::vector<env::EvalResult> grade_all(env::Verifier& verifier, const std::vector<GradeJob>& jobs, int threads) {
  std::vector<rl::GradeRequest> requests;
  requests.reserve(jobs.size());
  for (const auto& j : jobs) requests.push_back({j.task, j.answer});
  return rl::VerifierGrader(verifier, threads).grade(requests);
}

config::Experiment experiment_from_flags(const std::string& config_path, const std::vector<std::string>& sets) {
  if (!config_path.empty()) return config::load_experiment(config_path, sets);
  config::Experiment exp;
  for (const auto& s : sets) config::apply_override(exp, s);
  config::validate(exp, "--set");
  return exp;
}

}  // namespace leap::cli
