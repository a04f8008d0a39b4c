// The backends a lean worker (leap-worker) can build: the cpu backend only. leap's own
// env/worker_backend.cpp adds the cuda backend, whose GPU reference needs LibTorch.
#include <nlohmann/json.hpp>

#include "env/cpu_backend.hpp"
#include "env/worker_backend.hpp"
#include "util/error.hpp"

namespace leap::env {

std::unique_ptr<Backend> make_worker_backend(const std::string& spec_json) {
  const auto j = nlohmann::json::parse(spec_json);
  const std::string name = j.at("backend").get<std::string>();
  if (name == "cpu") return std::make_unique<CpuBackend>(CpuBackendOptions{}, WorkerSide{});
  throw Error("leap-worker runs only the cpu backend's workers, not '" + name + "'");
}

}  // namespace leap::env
