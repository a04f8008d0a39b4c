#pragma once
// A worker process started by the zygote (env/zygote.hpp): sandbox, then serve jobs.
// Internal to src/env (zygote.cpp calls it, worker_pool.cpp implements it).
#include <string>

#include "env/sandbox_child.hpp"

namespace leap::env {

/// In a child of the zygote, with the job socket on `sock` and the status memfd on `status_fd`:
/// applies the sandbox that `spec_json` (WorkerPool's worker spec) asks for, reports it on the
/// socket (the "ready" frame), builds the backend (make_worker_backend) and serves jobs until the
/// socket closes. Returns the process exit status.
int worker_process_main(const std::string& spec_json, int sock, int status_fd, const HostIsolation& host);

}  // namespace leap::env
