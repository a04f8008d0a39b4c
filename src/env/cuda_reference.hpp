#pragma once
// The task's reference timed on the GPU, inside a cuda worker process: TorchScript on CUDA tensors,
// timed the way a candidate is (cuda_backend.hpp), so that a cuda speedup compares GPU with GPU.
//
// Where it runs, and why in the worker and not in the parent: the parent forks its workers without
// exec (worker_pool.hpp), and a process that has initialised CUDA must not fork a child that uses
// CUDA (cuda_driver.hpp). A reference run on the GPU in the parent would create the parent's CUDA
// context, and every worker forked after it (a replacement after a fault or after
// max_jobs_per_worker jobs) could no longer use the GPU. The worker already takes the device's
// primary context, which LibTorch shares, so it can run LibTorch there; the parent stays free of
// CUDA, as before. The reference is trusted code, so nothing is lost by running it in a worker,
// and a reference job is one more worker job with its own time limit.
//
// How: the worker keeps, for its whole life, one non-blocking stream of the primary context
// (created like a candidate job's stream), two events and an L2 flush buffer (2x the device's L2,
// at least 8 MiB, or CudaBackendOptions::l2_flush_bytes). LibTorch is pointed at that stream
// (c10::cuda::getStreamFromExternal + CUDAStreamGuard), so every kernel of the TorchScript runs on
// it, between the two events. Each run: fresh clones of its input set (made before the flush, so
// the clone does not warm the L2 for the timed run; the parent's CPU reference gets clones too),
// an L2 flush (cuMemsetD8Async) and a persisting-L2 reset, event, reference, event. Warm-up,
// trials, time box and input-set rotation follow RunRequest exactly as a candidate job does. TF32
// is off (cuBLAS, cuDNN, float32 matmul precision "highest") and grad mode off while it runs;
// LibTorch's previous TF32 settings are restored afterwards, and its cached device memory is given
// back at the end of the job so candidate jobs in the same worker find the device memory free.
//
// "Same stream" as the candidate: a candidate job creates its stream and destroys it when the job
// ends, and the reference is timed in a later job (possibly in another worker of the pool), so it
// cannot be the very same CUstream object. It is a stream made the same way, on the same device and
// primary context, timed with the same events, flush and loop.
#include <cstdint>
#include <vector>

#include "env/backend.hpp"

namespace leap::env {

/// Runs `reference` on CUDA device `device` in this (worker) process and times it: the inputs of
/// each rotation r are plan.tensors[request.rotations[r][i]] for i < reference.inputs (identity
/// when there are no rotations), read from the host memory `tensors` (laid out as plan.tensors,
/// any dtype and shape of the task) and copied to the device once per job. Returns one time per
/// timed trial, in milliseconds (CUDA events around the reference's run), after
/// `request.warmup` untimed runs, within `request.max_seconds` (warm-up stops at half of it, at
/// least every input set and one trial run). `l2_flush_bytes` <= 0 means 2x the device's L2 (at
/// least 8 MiB). Never throws: a reference that fails to compile or to run, or a CUDA error, is a
/// runtime_error whose message names the device and the reason; out of device memory (LibTorch's
/// OutOfMemoryError, CUDA_ERROR_OUT_OF_MEMORY) is an infra_error (the verifier runs it again once).
RunOutcome time_reference_on_gpu(const ReferenceProgram& reference, const BoundPlan& plan,
                                 const std::vector<void*>& tensors, const RunRequest& request, int device,
                                 int64_t l2_flush_bytes);

}  // namespace leap::env
