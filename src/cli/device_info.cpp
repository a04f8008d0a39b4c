#include "cli/device_info.hpp"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/version.h>

#include <cstdlib>

#include "env/nvrtc_compiler.hpp"
#include "env/sandbox.hpp"
#include "util/omp_policy.hpp"
#if LEAP_HAVE_NVRTC
#include "env/cuda_driver.hpp"
#endif

namespace leap::cli {

std::string describe_devices(const config::Experiment& exp, bool cuda_policy, int gpu) {
  std::string out = cuda_policy ? fmt::format("policy: cuda:{}", gpu)
                                : fmt::format("policy: cpu ({} threads)", exp.model.cpu_threads > 0
                                                                             ? static_cast<int>(exp.model.cpu_threads)
                                                                             : at::get_num_threads());
  if (!cuda_policy) out += fmt::format(", OpenMP wait {}", util::omp_wait_setting());  // util/omp_policy.hpp
  out += fmt::format(", libtorch {}; env: {} backend, {} workers", TORCH_VERSION, exp.env.backend, exp.env.workers);
#if LEAP_HAVE_NVRTC
  std::string why;
  if (const auto d = env::probe_cuda_device(gpu, &why))
    out += fmt::format("; gpu {}: {}", gpu, d->summary());
  else
    out += "; gpu: none (" + why + ")";
#else
  out += "; gpu: not queried (built without the CUDA toolkit)";
#endif
  const std::string nvrtc = env::nvrtc_version();
  out += "; nvrtc " + (nvrtc.empty() ? std::string("not in this build") : nvrtc);
  // What generated code may do here (docs/env.md "Sandbox"); missing protections are named.
  try {
    out += "; env.sandbox " + exp.env.sandbox + ", " + env::host_sandbox_report().summary();
  } catch (const std::exception& e) {
    out += "; sandbox: unknown (" + std::string(e.what()) + ")";
  }
  return out;
}

}  // namespace leap::cli
