#include "env/worker_backend.hpp"

#include <nlohmann/json.hpp>

#include "env/cpu_backend.hpp"
#if LEAP_HAVE_NVRTC
#include "env/cuda_backend.hpp"
#endif
#include "util/error.hpp"

namespace leap::env {

std::unique_ptr<Backend> make_worker_backend(const std::string& spec_json) {
  const auto j = nlohmann::json::parse(spec_json);
  const std::string name = j.at("backend").get<std::string>();
  if (name == "cpu") return std::make_unique<CpuBackend>(CpuBackendOptions{}, WorkerSide{});
#if LEAP_HAVE_NVRTC
  if (name == "cuda") {
    CudaBackendOptions o;
    o.device = j.at("device").get<int>();
    o.l2_flush_bytes = j.at("l2_flush_bytes").get<int64_t>();
    return std::make_unique<CudaBackend>(o, j.at("arch").get<std::string>(), WorkerSide{});
  }
#endif
  throw Error("a worker cannot run the '" + name + "' backend in this build");
}

}  // namespace leap::env
