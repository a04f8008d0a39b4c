#include "rl/gpu_memory.hpp"

#include <torch/cuda.h>

#if LEAP_HAVE_NVRTC && __has_include(<c10/cuda/CUDACachingAllocator.h>)
#include <c10/cuda/CUDACachingAllocator.h>
#define LEAP_CUDA_ALLOCATOR 1
#else
#define LEAP_CUDA_ALLOCATOR 0
#endif

namespace leap::rl {

void release_cached_gpu_memory(bool policy_on_cuda) {
  if (!policy_on_cuda) return;
#if LEAP_CUDA_ALLOCATOR
  try {
    if (!torch::cuda::is_available()) return;  // (false without a driver; initialises nothing)
    c10::cuda::CUDACachingAllocator::emptyCache();
  } catch (...) {
    // Best effort: grading goes on with the memory still cached.
  }
#endif
}

std::vector<env::EvalResult> ReleasingGrader::grade(const std::vector<GradeRequest>& requests) {
  release_cached_gpu_memory(cuda_);
  return inner_.grade(requests);
}

}  // namespace leap::rl
