#include "env/cuda_reference.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>

#include "env/cuda_driver.hpp"
#include "env/reference.hpp"
#include "env/timing_schedule.hpp"

namespace leap::env {

namespace {

/// What a worker keeps for its reference jobs, set up by the first one. Never destroyed: a worker
/// leaves with _exit, and the driver frees everything with the process.
struct GpuState {
  bool ready = false;
  int device = -1;
  CUcontext ctx = nullptr;  // the device's primary context (retained once)
  CUstream stream = nullptr;
  CUevent start = nullptr, stop = nullptr;
  CUdeviceptr flush = 0;
  size_t flush_bytes = 0;
  std::map<std::string, Reference> programs;  // compiled references, by source (or file)
};

GpuState& state() {
  static GpuState* s = new GpuState();
  return *s;
}

/// Turns TF32 off in LibTorch (cuBLAS, cuDNN, float32 matmul precision) and restores the previous
/// settings when it goes out of scope.
class Tf32Off {
 public:
  Tf32Off() {
    auto& c = at::globalContext();
    cublas_ = c.allowTF32CuBLAS();
    cudnn_ = c.allowTF32CuDNN();
    precision_ = c.float32MatmulPrecision();
    c.setFloat32MatmulPrecision("highest");
    c.setAllowTF32CuBLAS(false);
    c.setAllowTF32CuDNN(false);
  }
  ~Tf32Off() {
    auto& c = at::globalContext();
    c.setFloat32MatmulPrecision(precision_ == at::Float32MatmulPrecision::HIGHEST ? "highest"
                                : precision_ == at::Float32MatmulPrecision::HIGH  ? "high"
                                                                                  : "medium");
    c.setAllowTF32CuBLAS(cublas_);
    c.setAllowTF32CuDNN(cudnn_);
  }
  Tf32Off(const Tf32Off&) = delete;
  Tf32Off& operator=(const Tf32Off&) = delete;

 private:
  bool cublas_ = false, cudnn_ = false;
  at::Float32MatmulPrecision precision_ = at::Float32MatmulPrecision::HIGHEST;
};

/// A CUDA failure as a leap::Error "<what>: CUDA_ERROR_... (...)".
/// CUDA_ERROR_OUT_OF_MEMORY from a driver call of the reference job (an infrastructure error).
struct DeviceOutOfMemory : Error {
  using Error::Error;
};

void check(CUresult r, const char* what) {
  if (r == CUDA_ERROR_OUT_OF_MEMORY) throw DeviceOutOfMemory(std::string(what) + ": " + cuda_error_text(r));
  cuda_check(r, what);
}

/// Sets up the context, stream, events and flush buffer once per process.
void set_up(const CudaDriverApi& d, GpuState& g, int device, int64_t l2_flush_bytes) {
  if (g.ready) {
    if (g.device != device) throw Error("internal: one worker asked to time references on two devices");
    check(d.cuCtxSetCurrent(g.ctx), "cuCtxSetCurrent");
    return;
  }
  check(d.cuInit(0), "cuInit");
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  check(d.cuDevicePrimaryCtxRetain(&g.ctx, dev), "cuDevicePrimaryCtxRetain");
  check(d.cuCtxSetCurrent(g.ctx), "cuCtxSetCurrent");
  int l2 = 0;
  d.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev);
  g.flush_bytes = l2_flush_bytes > 0 ? static_cast<size_t>(l2_flush_bytes)
                                     : std::max<size_t>(size_t(2) * static_cast<size_t>(l2), size_t(8) << 20);
  check(d.cuMemAlloc(&g.flush, g.flush_bytes), "allocating the L2 flush buffer");
  check(d.cuStreamCreate(&g.stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  check(d.cuEventCreate(&g.start, CU_EVENT_DEFAULT), "cuEventCreate");
  check(d.cuEventCreate(&g.stop, CU_EVENT_DEFAULT), "cuEventCreate");
  g.device = device;
  g.ready = true;
}

/// The compiled reference for `p`, compiled on first use in this process.
const Reference& program(GpuState& g, const ReferenceProgram& p) {
  const std::string key = p.torchscript.empty() ? "file:" + p.file : "torchscript:" + p.torchscript;
  auto it = g.programs.find(key);
  if (it == g.programs.end())
    it = g.programs.emplace(key, compile_reference(p.torchscript, p.file, p.task_file + ": reference", p.task_file,
                                                   p.inputs))
             .first;
  return it->second;
}

}  // namespace

RunOutcome time_reference_on_gpu(const ReferenceProgram& reference, const BoundPlan& plan,
                                 const std::vector<void*>& tensors, const RunRequest& request, int device,
                                 int64_t l2_flush_bytes) {
  RunOutcome out;
  const std::string where = "the reference on cuda:" + std::to_string(device);
  try {
    const CudaDriverApi& d = cuda_driver();
    GpuState& g = state();
    set_up(d, g, device, l2_flush_bytes);
    const Reference& ref = program(g, reference);
    {
      const auto index = static_cast<c10::DeviceIndex>(device);
      c10::cuda::CUDAGuard device_guard(index);
      c10::cuda::CUDAStreamGuard stream_guard(
          c10::cuda::getStreamFromExternal(reinterpret_cast<cudaStream_t>(g.stream), index));
      torch::NoGradGuard no_grad;
      Tf32Off tf32_off;

      // Every input set on the device, once (on the timing stream; a pageable copy is synchronous).
      const size_t n_rot = std::max<size_t>(1, request.rotations.size());
      const torch::Device dev(torch::kCUDA, index);
      std::vector<std::vector<torch::Tensor>> sets(n_rot);
      for (size_t rot = 0; rot < n_rot; ++rot)
        for (int i = 0; i < reference.inputs; ++i) {
          const size_t t = rotated_tensor(request, rot, i);
          const BoundTensor& bt = plan.tensors.at(t);
          torch::Tensor host = torch::from_blob(tensors.at(t), bt.shape, torch::TensorOptions().dtype(torch_dtype(bt.dtype)));
          sets[rot].push_back(host.to(torch::TensorOptions().device(dev), /*non_blocking=*/false, /*copy=*/true));
        }

      // The schedule of a candidate job (env/timing_schedule.hpp); the reference is trusted, so
      // its inputs are not rewritten between runs.
      std::vector<c10::IValue> args;
      RunHooks hooks;
      hooks.prepare = [&](int run, size_t rot) {
        // Fresh clones before the flush: the reference may write to its arguments, and copying them
        // after the flush would bring the inputs back into the L2.
        args.clear();
        for (const auto& x : sets[rot]) args.emplace_back(x.clone());
        check(d.cuMemsetD8Async(g.flush, static_cast<unsigned char>(run), g.flush_bytes, g.stream), "flushing the L2 cache");
            return true;
      };
      hooks.timed = [&](int run, size_t) -> double {
        check(d.cuEventRecord(g.start, g.stream), "cuEventRecord");
        std::vector<torch::Tensor> outs = ref.call(std::move(args));
        check(d.cuEventRecord(g.stop, g.stream), "cuEventRecord");
        check(d.cuEventSynchronize(g.stop), "running the reference");
        float ms = 0;
        check(d.cuEventElapsedTime(&ms, g.start, g.stop), "cuEventElapsedTime");
        if (run == 0)
          for (const auto& o : outs)
            if (!o.is_cuda()) throw Error("it returned a tensor on " + o.device().str() + ", not on the GPU");
        return ms;
      };
      run_timing_schedule(request, n_rot, hooks, out);
      check(d.cuStreamSynchronize(g.stream), "running the reference");
    }
    // The tensors are gone: give LibTorch's cached blocks back, for the candidates of this worker.
    c10::cuda::CUDACachingAllocator::emptyCache();
  } catch (const c10::OutOfMemoryError& e) {
    // Out of device memory (LibTorch's allocator): the environment's fault, run once more by the
    // verifier (an infra_error). Give back what this job cached first.
    out = RunOutcome{};
    out.verdict = Verdict::infra_error;
    out.message = where + " ran out of device memory: " + std::string(e.what_without_backtrace());
    try {
      c10::cuda::CUDACachingAllocator::emptyCache();
    } catch (...) {
    }
  } catch (const DeviceOutOfMemory& e) {
    out = RunOutcome{};
    out.verdict = Verdict::infra_error;
    out.message = where + " ran out of device memory: " + e.what();
  } catch (const std::exception& e) {
    // (TorchScript's interpreter may rethrow LibTorch's out-of-memory as a plain error.)
    const std::string what = e.what();
    out = RunOutcome{};
    out.verdict = what.find("CUDA out of memory") != std::string::npos ? Verdict::infra_error : Verdict::runtime_error;
    out.message = where + " failed: " + what;
  }
  return out;
}

}  // namespace leap::env
