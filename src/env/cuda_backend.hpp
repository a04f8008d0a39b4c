#pragma once
// The cuda backend: ```cuda solutions compiled by NVRTC to CUBIN in the parent (CPU only, no GPU
// needed), then loaded and launched through the CUDA driver API inside a worker process.
//
// The parent never initialises CUDA (it only compiles, and asks about the GPU through a forked
// probe, see cuda_driver.hpp), so forking workers stays safe. A worker takes the device's primary
// context, loads the CUBIN, copies every tensor from the shared host memory to its own device
// buffer, runs the launches in order on one stream, and copies every tensor back (inputs too, so
// a write to an input is seen by the verifier). Timing: CUDA events around the whole launch
// sequence of each trial, with an L2 flush (a memset of a buffer >= 2x the L2 size) and a
// persisting-L2 reset before every run. A fault that poisons the context (illegal address,
// misaligned access, trap, ...) is a runtime_error naming the CUDA error; the worker then exits
// and the pool replaces it. The task's reference is timed on the same GPU, in a worker too, the
// same way (env/cuda_reference.hpp).
//
// Calling convention: a tensor argument is its device pointer; an int64 argument 8 bytes (a
// 4-byte `int` parameter takes the low half when the value fits); float32 a float; float64 a
// double. Where the driver can tell (cuFuncGetParamInfo), a parameter count or size that does
// not match the launch plan is a launch_error before anything runs.
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "env/backend.hpp"
#include "env/nvrtc_compiler.hpp"

namespace leap::env {

struct CudaDeviceInfo;  // env/cuda_driver.hpp

/// Settings of the cuda backend.
struct CudaBackendOptions {
  /// NVRTC settings; `nvrtc.arch` is used when no GPU is found (with a GPU, its own arch wins).
  NvrtcOptions nvrtc;
  int device = 0;               ///< GPU ordinal
  /// true: the constructor throws CudaUnavailableError when no GPU/driver is usable (what `leap
  /// eval --backend cuda` wants). false: compile-only use without a GPU (tests, `leap tasks
  /// validate`); execute() then reports a runtime_error saying there is no GPU.
  bool require_device = true;
  int64_t l2_flush_bytes = 0;   ///< L2 flush buffer, bytes; 0 = 2x the device's L2 (at least 8 MiB)
};

/// NVRTC + driver-API backend. compile() is thread-safe; execute() runs in a worker process.
class CudaBackend : public Backend {
 public:
  /// Probes the GPU (in a forked child) and prepares NVRTC. Throws CudaUnavailableError when
  /// `require_device` is set and there is no usable GPU; leap::Error when NVRTC is missing or
  /// cannot target the GPU's architecture.
  explicit CudaBackend(CudaBackendOptions options = {});
  /// The execute side only, inside a worker process (make_worker_backend): no probe, no NVRTC;
  /// `arch` is what the parent compiled for (for messages).
  CudaBackend(CudaBackendOptions options, std::string arch, WorkerSide);
  ~CudaBackend() override;
  /// {"backend": "cuda", "device", "l2_flush_bytes", "arch"}.
  std::string worker_spec() const override;

  std::string name() const override { return "cuda"; }
  CodeLanguage language() const override { return CodeLanguage::cuda; }
  /// The device's limits (threads, block and grid dims, opt-in shared memory per block); without a
  /// device, Hopper's (1024 threads, 2^31-1 x 65535 x 65535 grid, 227 KiB shared memory).
  LaunchLimits limits() const override;
  PlanParseOptions plan_options() const override;
  CompileOutcome compile(const std::string& code, const LaunchPlan& plan) override;
  RunOutcome execute(const Artifact& artifact, const BoundPlan& plan, const std::vector<void*>& tensors,
                     const RunRequest& request, std::atomic<int>* current_launch) override;
  /// True after a fault that poisoned this worker's CUDA context.
  bool worker_must_exit() const override { return poisoned_; }
  /// A cuda worker runs no host code of the answer, and may reply infra_error (out of device
  /// memory while it sets a job up, or in the GPU reference; docs/env.md "Infrastructure errors").
  std::vector<Verdict> worker_verdicts() const override {
    return {Verdict::correct, Verdict::launch_error, Verdict::runtime_error, Verdict::infra_error};
  }
  /// "cuda:<device>" when there is a GPU (the reference is then run and timed on it inside a
  /// worker, see env/cuda_reference.hpp); empty in compile-only use (the verifier times the
  /// reference on the CPU).
  std::string reference_device() const override;
  /// Runs and times `reference` on the GPU in this worker (time_reference_on_gpu); a CUDA error
  /// that poisons the context also ends the worker, as a candidate's fault does.
  RunOutcome time_reference(const ReferenceProgram& reference, const BoundPlan& plan, const std::vector<void*>& tensors,
                            const RunRequest& request) override;

  /// The GPU found at construction, or nullopt (compile-only).
  const std::optional<CudaDeviceInfo>& device() const;
  /// Why there is no device (empty when there is one).
  const std::string& no_device_reason() const { return no_device_reason_; }
  /// The NVRTC front end (its cache and counters).
  NvrtcCompiler& compiler() { return *compiler_; }
  /// The architecture compiled for ("sm_90").
  const std::string& arch() const { return arch_; }

 private:
  CudaBackendOptions options_;
  std::unique_ptr<std::optional<CudaDeviceInfo>> device_;  // pointer: CudaDeviceInfo is incomplete here
  std::string no_device_reason_;
  std::string arch_;
  std::unique_ptr<NvrtcCompiler> compiler_;
  // Worker-side state (only touched inside a worker process).
  void* ctx_ = nullptr;  // CUcontext of the primary context, retained once per process
  bool poisoned_ = false;
};

}  // namespace leap::env
