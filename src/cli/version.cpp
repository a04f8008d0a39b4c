// `leap version`: what this binary is and what it can reach.
#include <CLI/CLI.hpp>
#include <torch/cuda.h>

#include "util/omp_policy.hpp"
#include <cstdlib>
#include <torch/version.h>

#include <iostream>

#include "cli/commands.hpp"
#include "env/sandbox.hpp"
#include "util/build_info.hpp"

#if LEAP_HAVE_NVRTC
#include <nvrtc.h>

#include "env/cuda_driver.hpp"
#endif

namespace leap::cli {

Handler add_version(CLI::App& app, const GlobalOptions& g) {
  app.add_subcommand("version", "Print version, git commit, LibTorch version, CUDA and NVRTC availability");
  return [] {
    std::cout << "leap " << LEAP_VERSION << "\n";
    std::cout << "git commit: " << leap::git_commit() << "\n";
    std::cout << "libtorch: " << TORCH_VERSION << "\n";
    // What libgomp was loaded with (util/omp_policy.hpp restarts leap with a short spin when unset).
    std::cout << "openmp wait: " << util::omp_wait_setting() << "\n";
    // torch::cuda::device_count() loads the CUDA runtime lazily and asks the driver; with no
    // driver or no GPU it answers 0 rather than failing.
    int64_t gpus = static_cast<int64_t>(torch::cuda::device_count());
    std::cout << "cuda: " << (gpus > 0 ? "available, " + std::to_string(gpus) + " device(s)" : std::string("not available (no GPU or no driver)"))
              << "\n";
#if LEAP_HAVE_NVRTC
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) == NVRTC_SUCCESS)
      std::cout << "nvrtc: available, " << major << "." << minor << "\n";
    else
      std::cout << "nvrtc: not available\n";
    // The driver API, loaded lazily (dlopen); what the cuda backend would run on.
    try {
      env::CudaDeviceInfo d = env::query_cuda_device(0);
      std::cout << "gpu: " << d.summary() << "\n";
    } catch (const std::exception& e) {
      std::cout << "gpu: none (" << e.what() << ")\n";
    }
#else
    std::cout << "nvrtc: not available (built without the CUDA toolkit)\n";
#endif
    // What the workers and the compiler get on this host (env.sandbox; docs/env.md "Sandbox").
    try {
      std::cout << env::host_sandbox_report().summary() << "\n";
    } catch (const std::exception& e) {
      std::cout << "sandbox: unknown (" << e.what() << ")\n";
    }
    return 0;
  };
}

}  // namespace leap::cli
