#pragma once
// A verifier over a test subclass of the cpu backend whose workers are forked from the test
// process (so they run that backend object itself), with the state the subclass reads and writes
// in anonymous shared memory, seen alike by the test and its workers: how test_env_infra.cpp
// injects faults and test_env_cpu_bound.cpp forges reported times.
#include <sys/mman.h>

#include <doctest/doctest.h>

#include <memory>
#include <new>
#include <string>
#include <vector>

#include "env/cpu_backend.hpp"
#include "env/verifier.hpp"
#include "env/worker_pool.hpp"
#include "support.hpp"

namespace leap::test {

/// `Backend` is constructed as Backend(CpuBackendOptions, Shared*); `Shared` is default-constructed
/// in shared memory. `workers` workers (one by default), 60 s of CPU time a job (these rigs are not about time limits: the
/// wall-clock backstop, 3 x 60 s, outlasts a machine stalled by other tests), compile flags
/// `flags`, verifier options `options`.
template <class Shared, class Backend>
struct ForkedRig {
  TempDir cache;
  Shared* shared = nullptr;
  std::shared_ptr<Backend> backend;
  std::shared_ptr<env::WorkerPool> pool;
  std::unique_ptr<env::Verifier> verifier;

  ForkedRig(std::vector<std::string> flags, const env::VerifierOptions& options, int workers = 1) {
    void* m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    shared = new (m) Shared();
    env::CpuBackendOptions co;
    co.cache_dir = cache.path.string();
    co.flags = std::move(flags);
    backend = std::make_shared<Backend>(co, shared);
    env::PoolOptions po;
    po.workers = workers;
    po.run_timeout_s = 60;
    po.cpu_time_limit = true;
    po.spawn = env::PoolOptions::Spawn::fork;  // the workers run this process's backend object
    pool = std::make_shared<env::WorkerPool>(backend, po);
    verifier = std::make_unique<env::Verifier>(backend, pool, options);
  }
  ~ForkedRig() {
    verifier.reset();
    pool.reset();
    shared->~Shared();
    munmap(shared, sizeof(Shared));
  }
  ForkedRig(const ForkedRig&) = delete;
  ForkedRig& operator=(const ForkedRig&) = delete;
};

}  // namespace leap::test
