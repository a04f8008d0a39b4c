#pragma once
// The backend a worker process builds from its spec (Backend::worker_spec), without any of the
// parent's state: no compile cache, no GPU probe.
#include <memory>
#include <string>

#include "env/backend.hpp"

namespace leap::env {

/// Builds the worker-side backend for `spec_json` ({"backend": "cpu"} or {"backend": "cuda",
/// "device": N, "l2_flush_bytes": B, "arch": "sm_90"}). Throws leap::Error for an unknown backend
/// or one this build lacks.
std::unique_ptr<Backend> make_worker_backend(const std::string& spec_json);

}  // namespace leap::env
