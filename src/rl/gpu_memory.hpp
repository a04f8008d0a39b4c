#pragma once
// The parent's cached GPU memory, given back before grading (issue "GPU path II", item 8): LibTorch's
// caching allocator keeps the blocks of generation (KV cache, logits) and of the update reserved
// after they are freed, and the cuda workers (other processes on the same GPU) allocate the
// answers' tensors and run the references while the trainer waits for their verdicts. A worker
// that cannot allocate replies infra_error and is retried once (env/verifier.hpp); releasing
// first makes that rare. No torch headers here.
#include <vector>

#include "rl/grader.hpp"

namespace leap::rl {

/// Gives the unused blocks of LibTorch's CUDA caching allocator back to the driver
/// (c10::cuda::CUDACachingAllocator::emptyCache). A no-op when `policy_on_cuda` is false, in a
/// build without CUDA LibTorch, or when no CUDA device is available (so it never initialises
/// CUDA, and the binary starts on a machine without a driver). Never throws.
void release_cached_gpu_memory(bool policy_on_cuda);

/// A Grader that calls release_cached_gpu_memory(policy_on_cuda) before passing each batch to
/// `inner` (which must outlive it); results and exceptions are `inner`'s.
class ReleasingGrader : public Grader {
 public:
  ReleasingGrader(Grader& inner, bool policy_on_cuda) : inner_(inner), cuda_(policy_on_cuda) {}
  std::vector<env::EvalResult> grade(const std::vector<GradeRequest>& requests) override;

 private:
  Grader& inner_;
  bool cuda_;
};

}  // namespace leap::rl
