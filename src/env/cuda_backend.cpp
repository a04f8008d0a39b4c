#include "env/cuda_backend.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "env/cuda_driver.hpp"
#include "env/cuda_reference.hpp"
#include "env/poison.hpp"
#include "env/run_sample.hpp"
#include "env/timing_schedule.hpp"
#include "util/median.hpp"
#include "util/error.hpp"

namespace leap::env {

namespace {

std::string read_binary(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read the compiled module " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string dims_text(const std::array<int64_t, 3>& d) {
  return "[" + std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", " + std::to_string(d[2]) + "]";
}

std::string launch_name(const BoundPlan& plan, size_t li) {
  return "launches[" + std::to_string(li) + "] (" + plan.launches[li].kernel + ")";
}

const char* kind_text(ArgKind k) {
  switch (k) {
    case ArgKind::tensor: return "a tensor (8-byte pointer)";
    case ArgKind::int64: return "an int64 value";
    case ArgKind::float32: return "a float32 value";
    case ArgKind::float64: return "a float64 value";
  }
  return "?";
}

}  // namespace

CudaBackend::CudaBackend(CudaBackendOptions options)
    : options_(std::move(options)), device_(std::make_unique<std::optional<CudaDeviceInfo>>()) {
  *device_ = probe_cuda_device(options_.device, &no_device_reason_);
  if (!*device_ && options_.require_device)
    throw CudaUnavailableError("the cuda backend needs an NVIDIA GPU and its driver: " + no_device_reason_);
  arch_ = *device_ ? nvrtc_arch_for((*device_)->cc_major, (*device_)->cc_minor) : options_.nvrtc.arch;
  if (*device_) {
    const int cc = (*device_)->cc_major * 10 + (*device_)->cc_minor;
    auto archs = nvrtc_supported_archs();
    if (!archs.empty() && std::find(archs.begin(), archs.end(), cc) == archs.end())
      throw Error("NVRTC " + nvrtc_version() + " cannot compile for this GPU's architecture " + (*device_)->arch());
  }
  NvrtcOptions no = options_.nvrtc;
  no.arch = arch_;
  compiler_ = std::make_unique<NvrtcCompiler>(no);
}

CudaBackend::CudaBackend(CudaBackendOptions options, std::string arch, WorkerSide)
    : options_(std::move(options)), device_(std::make_unique<std::optional<CudaDeviceInfo>>()), arch_(std::move(arch)) {}

CudaBackend::~CudaBackend() = default;

std::string CudaBackend::worker_spec() const {
  return "{\"backend\": \"cuda\", \"device\": " + std::to_string(options_.device) +
         ", \"l2_flush_bytes\": " + std::to_string(options_.l2_flush_bytes) + ", \"arch\": \"" + arch_ + "\"}";
}

const std::optional<CudaDeviceInfo>& CudaBackend::device() const { return *device_; }

LaunchLimits CudaBackend::limits() const {
  LaunchLimits l;
  if (*device_) {
    const CudaDeviceInfo& d = **device_;
    l.max_threads_per_block = d.max_threads_per_block;
    l.max_block = d.max_block;
    l.max_grid = d.max_grid;
    l.max_shared_bytes = std::max(d.max_shared_per_block_optin, d.max_shared_per_block);
  } else {  // Hopper (sm_90) values
    l.max_threads_per_block = 1024;
    l.max_block = {1024, 1024, 64};
    l.max_grid = {2147483647, 65535, 65535};
    l.max_shared_bytes = 232448;  // 227 KiB
  }
  return l;
}

PlanParseOptions CudaBackend::plan_options() const {
  PlanParseOptions o;
  o.require_grid_block = true;
  return o;
}

CompileOutcome CudaBackend::compile(const std::string& code, const LaunchPlan& plan) {
  (void)plan;  // argument types are checked against the kernel's parameters at launch time
  NvrtcResult r = compiler_->compile(code);
  return CompileOutcome{
      .ok = r.ok,
      .artifact = {.backend = name(), .path = r.cubin_path, .exports = r.exports, .key = r.key, .from_cache = r.from_cache},
      .log = r.log,
      .feedback = r.feedback,
      .timed_out = r.timed_out,
      .seconds = r.seconds};
}

std::string CudaBackend::reference_device() const {
  return *device_ ? "cuda:" + std::to_string(options_.device) : std::string();
}

RunOutcome CudaBackend::time_reference(const ReferenceProgram& reference, const BoundPlan& plan,
                                       const std::vector<void*>& tensors, const RunRequest& request) {
  RunOutcome out;
  if (poisoned_) {
    out.verdict = Verdict::runtime_error;
    out.message = "internal: this worker's CUDA context was poisoned by an earlier job";
    return out;
  }
  out = time_reference_on_gpu(reference, plan, tensors, request, options_.device, options_.l2_flush_bytes);
  if (!out.ok()) {
    // A sticky error (a faulting reference kernel) leaves the context unusable: end this worker.
    try {
      const CudaDriverApi& d = cuda_driver();
      CUresult r = d.cuCtxSynchronize();
      if (cuda_error_is_sticky(r)) {
        poisoned_ = true;
        out.message += " (the CUDA context is lost; the worker process is replaced)";
      }
    } catch (const CudaUnavailableError&) {
    }
  }
  return out;
}

namespace {

/// One job of CudaBackend::execute: its device resources (released at the end unless the
/// context is poisoned: then the process exits, and the driver frees everything with it) and
/// its steps. Each step returns false with `out` filled (fail) when a driver call fails.
class CudaJob {
 public:
  CudaJob(const CudaDriverApi& d, bool& poisoned, const BoundPlan& plan, const std::vector<void*>& tensors,
          const RunRequest& request, std::atomic<int>* current_launch, RunOutcome& out)
      : d(d), poisoned(poisoned), plan(plan), tensors(tensors), request(request), current_launch(current_launch),
        out(out), n_rot(std::max<size_t>(1, request.rotations.size())) {
    if (request.worker_sample_slots > 0)
      sample.emplace(static_cast<size_t>(request.worker_sample_slots), request.rewrite_seed, request.worker_sample_outputs);
  }
  ~CudaJob() {
    if (poisoned) return;
    for (CUdeviceptr p : buffers)
      if (p) d.cuMemFree(p);
    for (const auto& [dtype, p] : poison_src) d.cuMemFree(p);
    if (flush) d.cuMemFree(flush);
    if (start) d.cuEventDestroy(start);
    if (stop) d.cuEventDestroy(stop);
    for (CUevent e : marks)
      if (e) d.cuEventDestroy(e);
    if (stream) d.cuStreamDestroy(stream);
    if (module) d.cuModuleUnload(module);
  }
  CudaJob(const CudaJob&) = delete;
  CudaJob& operator=(const CudaJob&) = delete;

  /// Fills `out` for a failed driver call; a sticky error poisons the context.
  void fail(Verdict v, const std::string& text, CUresult r, int launch) {
    out.verdict = v;
    out.failed_launch = launch;
    out.message = text + (r == CUDA_SUCCESS ? std::string() : ": " + cuda_error_text(r));
    // Out of device memory while the environment sets the job up (the task's tensors, the flush
    // and poison buffers) before any of the answer's scratch was allocated: other processes hold
    // the memory, so it says nothing about the answer; the verifier runs the job once more
    // (docs/env.md "Infrastructure errors"). Once the answer's scratch holds device memory, or at
    // launch (the kernel's own needs), an out-of-memory is the answer's launch_error.
    if (r == CUDA_ERROR_OUT_OF_MEMORY && launch < 0 && v != Verdict::launch_error)
      out.verdict = scratch_allocated ? Verdict::launch_error : Verdict::infra_error;
    if (cuda_error_is_sticky(r)) {
      poisoned = true;
      out.verdict = Verdict::runtime_error;
      out.message += " (the CUDA context is lost; the worker process is replaced)";
    }
    if (current_launch) current_launch->store(-1);
  }

  /// 1. The device's primary context (the one LibTorch would use too), retained once in `ctx`.
  bool set_up_context(int device, void*& ctx) {
    CUresult r = d.cuInit(0);
    if (r == CUDA_SUCCESS) r = d.cuDeviceGet(&dev, device);
    if (r == CUDA_SUCCESS && !ctx) {
      CUcontext c = nullptr;
      r = d.cuDevicePrimaryCtxRetain(&c, dev);
      ctx = c;
    }
    if (r == CUDA_SUCCESS) r = d.cuCtxSetCurrent(static_cast<CUcontext>(ctx));
    if (r == CUDA_SUCCESS) return true;
    poisoned = true;  // nothing works in this process; let the pool start another
    fail(Verdict::runtime_error, "cannot set up the GPU in the worker", r, -1);
    return false;
  }

  /// 2. The module and every launch's function, with the checks that need the compiled kernel.
  bool load_functions(const Artifact& artifact, const std::string& arch);
  /// 3. One device buffer per tensor, filled from the shared host memory; the L2 flush buffer;
  /// the stream and events.
  bool allocate(int64_t l2_flush_bytes);
  /// 4. Argument slots: one 8-byte slot per argument, per rotation; kernelParams point at them.
  void bind_arguments();
  /// The poisoned output sources, one device buffer per output dtype (multi-run jobs).
  bool upload_poison_sources();
  /// Before a run, on the timing stream: outputs poisoned, inputs rewritten, the L2 flushed.
  bool prepare_run(int run, size_t rot);
  /// One run of the launch sequence between the start and stop events (ms; -1 on failure); with
  /// `mark`, an event after each launch too, and each launch's time appended to launch_samples.
  double run_launches(int run, size_t rot, bool mark);
  /// After a checked run: its outputs copied into their snapshot tensors.
  bool copy_snapshots(int run, size_t rot);
  /// 6. Every tensor back to the shared host memory (inputs too: the verifier checks them).
  bool download();

  const CudaDriverApi& d;
  bool& poisoned;
  const BoundPlan& plan;
  const std::vector<void*>& tensors;
  const RunRequest& request;
  std::atomic<int>* current_launch;
  RunOutcome& out;
  const size_t n_rot;
  bool profile = false;  ///< per-launch times from the warm-up runs (RunRequest::profile_launches)
  std::vector<std::vector<double>> launch_samples;  ///< [launch][warm-up run]
  /// The checked runs drawn as they are made (RunRequest::worker_sample_slots > 0).
  std::optional<RunSample> sample;

 private:
  CUdevice dev = 0;
  CUmodule module = nullptr;
  CUstream stream = nullptr;
  CUevent start = nullptr, stop = nullptr;
  std::vector<CUevent> marks;  // one after each launch (profiled warm-up runs only)
  std::vector<CUdeviceptr> buffers;
  CUdeviceptr flush = 0;
  size_t flush_bytes = 0;
  std::map<DType, CUdeviceptr> poison_src;  // poisoned output sources, one per output dtype
  bool scratch_allocated = false;           // the answer's scratch holds device memory (see `fail`)
  std::vector<CUfunction> fn;
  std::vector<std::vector<std::vector<uint64_t>>> slots;  // [launch][rot][arg]
  std::vector<std::vector<std::vector<void*>>> params;
  bool multi = false;
  std::vector<RewriteTarget> targets;
  size_t n_positions = 0;

  /// Checks launch li's block and shared memory against the kernel `f`, and its arguments
  /// against the kernel's parameters where the driver can list them.
  bool check_launch(size_t li, CUfunction f, int max_optin);
};

bool CudaJob::check_launch(size_t li, CUfunction f, int max_optin) {
  const BoundLaunch& l = plan.launches[li];
  const int ili = static_cast<int>(li);
  const int64_t threads = l.block[0] * l.block[1] * l.block[2];
  int max_threads = 0, regs = 0, static_smem = 0;
  d.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f);
  d.cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, f);
  d.cuFuncGetAttribute(&static_smem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, f);
  if (max_threads > 0 && threads > max_threads) {
    fail(Verdict::launch_error,
         launch_name(plan, li) + ": block " + dims_text(l.block) + " has " + std::to_string(threads) +
             " threads, but this kernel uses " + std::to_string(regs) + " registers per thread and can run at most " +
             std::to_string(max_threads) + " threads per block",
         CUDA_SUCCESS, ili);
    return false;
  }
  if (max_optin > 0 && static_smem + l.shared_bytes > max_optin) {
    fail(Verdict::launch_error,
         launch_name(plan, li) + ": " + std::to_string(static_smem) + " bytes of static and " +
             std::to_string(l.shared_bytes) + " bytes of dynamic shared memory exceed the GPU's " +
             std::to_string(max_optin) + " bytes per block",
         CUDA_SUCCESS, ili);
    return false;
  }
  if (!d.cuFuncGetParamInfo) return true;  // the parameters, where the driver can list them
  std::vector<size_t> sizes;
  for (size_t k = 0;; ++k) {
    size_t off = 0, size = 0;
    if (d.cuFuncGetParamInfo(f, k, &off, &size) != CUDA_SUCCESS) break;
    sizes.push_back(size);
  }
  if (sizes.size() != l.args.size()) {
    fail(Verdict::launch_error,
         launch_name(plan, li) + ": the kernel takes " + std::to_string(sizes.size()) +
             " parameters but the launch plan passes " + std::to_string(l.args.size()) + " arguments",
         CUDA_SUCCESS, ili);
    return false;
  }
  for (size_t k = 0; k < sizes.size(); ++k) {
    const BoundArg& a = l.args[k];
    bool fits = false;
    switch (a.kind) {
      case ArgKind::tensor: fits = sizes[k] == 8; break;
      case ArgKind::int64: fits = sizes[k] == 8 || (sizes[k] == 4 && a.i >= INT32_MIN && a.i <= INT32_MAX); break;
      case ArgKind::float32: fits = sizes[k] == 4; break;
      case ArgKind::float64: fits = sizes[k] == 8; break;
    }
    if (!fits) {
      fail(Verdict::launch_error,
           launch_name(plan, li) + ": argument " + std::to_string(k + 1) + " is " + kind_text(a.kind) +
               " but the kernel's parameter " + std::to_string(k + 1) + " is " + std::to_string(sizes[k]) + " bytes" +
               (a.kind == ArgKind::int64 && sizes[k] == 4 ? " and the value does not fit in 32 bits" : ""),
           CUDA_SUCCESS, ili);
      return false;
    }
  }
  return true;
}

bool CudaJob::load_functions(const Artifact& artifact, const std::string& arch) {
  const std::string image = read_binary(artifact.path);
  CUresult r = d.cuModuleLoadData(&module, image.data());
  if (r != CUDA_SUCCESS) {
    fail(Verdict::launch_error, "the compiled module (" + arch + ") could not be loaded on this GPU", r, -1);
    return false;
  }
  int max_optin = 0;
  d.cuDeviceGetAttribute(&max_optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, dev);
  std::map<std::string, CUfunction> functions;
  std::map<std::string, int64_t> max_dynamic;  // per kernel: the largest dynamic shared memory asked for
  fn.assign(plan.launches.size(), nullptr);
  for (size_t li = 0; li < plan.launches.size(); ++li) {
    const BoundLaunch& l = plan.launches[li];
    const int ili = static_cast<int>(li);
    auto it = functions.find(l.kernel);
    if (it == functions.end()) {
      CUfunction f = nullptr;
      r = d.cuModuleGetFunction(&f, module, l.kernel.c_str());
      if (r == CUDA_ERROR_NOT_FOUND) {
        fail(Verdict::launch_error,
             launch_name(plan, li) + ": unknown kernel '" + l.kernel +
                 "': the compiled code has no extern \"C\" __global__ function of that name",
             CUDA_SUCCESS, ili);
        return false;
      }
      if (r != CUDA_SUCCESS) {
        fail(Verdict::launch_error, launch_name(plan, li) + ": cuModuleGetFunction", r, ili);
        return false;
      }
      it = functions.emplace(l.kernel, f).first;
    }
    fn[li] = it->second;
    if (!check_launch(li, it->second, max_optin)) return false;
    max_dynamic[l.kernel] = std::max(max_dynamic[l.kernel], l.shared_bytes);
  }
  for (const auto& [kernel, bytes] : max_dynamic) {
    if (bytes <= 0) continue;
    r = d.cuFuncSetAttribute(functions[kernel], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes));
    if (r != CUDA_SUCCESS) {
      fail(Verdict::launch_error,
           "kernel " + kernel + ": cannot allow " + std::to_string(bytes) + " bytes of dynamic shared memory", r, -1);
      return false;
    }
  }
  return true;
}

bool CudaJob::allocate(int64_t l2_flush_bytes) {
  CUresult r = CUDA_SUCCESS;
  buffers.assign(plan.tensors.size(), 0);
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const size_t bytes = plan.tensors[i].bytes();
    const bool scratch = plan.tensors[i].role == TensorRole::scratch;
    r = d.cuMemAlloc(&buffers[i], std::max<size_t>(bytes, 1));
    if (r != CUDA_SUCCESS) {
      buffers[i] = 0;
      fail(r == CUDA_ERROR_OUT_OF_MEMORY && !scratch ? Verdict::runtime_error : Verdict::launch_error,
           "cannot allocate " + std::to_string(bytes) + " bytes of device memory for '" + plan.tensors[i].name + "'", r,
           -1);
      return false;
    }
    scratch_allocated = scratch_allocated || scratch;
    if (bytes && (r = d.cuMemcpyHtoD(buffers[i], tensors.at(i), bytes)) != CUDA_SUCCESS) {
      fail(Verdict::runtime_error, "copying '" + plan.tensors[i].name + "' to the GPU", r, -1);
      return false;
    }
  }
  int l2 = 0;
  d.cuDeviceGetAttribute(&l2, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, dev);
  flush_bytes = l2_flush_bytes > 0 ? static_cast<size_t>(l2_flush_bytes)
                                   : std::max<size_t>(size_t(2) * static_cast<size_t>(l2), size_t(8) << 20);
  if ((r = d.cuMemAlloc(&flush, flush_bytes)) != CUDA_SUCCESS) {
    flush = 0;
    fail(Verdict::runtime_error, "cannot allocate the L2 flush buffer", r, -1);
    return false;
  }
  if ((r = d.cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS ||
      (r = d.cuEventCreate(&start, CU_EVENT_DEFAULT)) != CUDA_SUCCESS ||
      (r = d.cuEventCreate(&stop, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
    fail(Verdict::runtime_error, "cannot create the stream and events", r, -1);
    return false;
  }
  // Per-launch profile (RunRequest::profile_launches): an event after each launch, in the
  // untimed warm-up runs only.
  profile = request.profile_launches && plan.launches.size() > 1 && (request.warmup > 1 || request.warmup_ms > 0);
  if (profile) {
    marks.assign(plan.launches.size(), nullptr);
    for (CUevent& e : marks)
      if ((r = d.cuEventCreate(&e, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
        fail(Verdict::runtime_error, "cannot create the profiling events", r, -1);
        return false;
      }
  }
  launch_samples.assign(profile ? plan.launches.size() : 0, {});
  // Pageable host-to-device copies may still be in flight: finish them before the first launch.
  if ((r = d.cuCtxSynchronize()) != CUDA_SUCCESS) {
    fail(Verdict::runtime_error, "uploading the tensors", r, -1);
    return false;
  }
  return true;
}

void CudaJob::bind_arguments() {
  slots.assign(plan.launches.size(), {});
  params.assign(plan.launches.size(), {});
  for (size_t li = 0; li < plan.launches.size(); ++li) {
    const BoundLaunch& l = plan.launches[li];
    slots[li].assign(n_rot, std::vector<uint64_t>(l.args.size(), 0));
    params[li].assign(n_rot, std::vector<void*>(l.args.size(), nullptr));
    for (size_t rot = 0; rot < n_rot; ++rot)
      for (size_t k = 0; k < l.args.size(); ++k) {
        const BoundArg& a = l.args[k];
        uint64_t& s = slots[li][rot][k];
        switch (a.kind) {
          case ArgKind::tensor: s = static_cast<uint64_t>(buffers.at(rotated_tensor(request, rot, a.tensor))); break;
          case ArgKind::int64: std::memcpy(&s, &a.i, 8); break;  // little-endian: an int parameter reads the low half
          case ArgKind::float32: {
            float f = static_cast<float>(a.f);
            std::memcpy(&s, &f, 4);
            break;
          }
          case ArgKind::float64: std::memcpy(&s, &a.f, 8); break;
        }
        params[li][rot][k] = &s;
      }
  }
}

bool CudaJob::upload_poison_sources() {
  multi = std::max(0, request.warmup) + std::max(1, request.trials) > 1 || n_rot > 1;
  targets = rewrite_targets(plan, request);
  n_positions = request.rotations.empty() ? plan.tensors.size() : request.rotations[0].size();
  std::map<DType, size_t> poison_bytes;  // largest output per dtype
  for (size_t rot = 0; multi && rot < n_rot; ++rot)
    for (size_t i = 0; i < n_positions; ++i) {
      const BoundTensor& bt = plan.tensors.at(rotated_tensor(request, rot, static_cast<int>(i)));
      if (bt.role == TensorRole::output) poison_bytes[bt.dtype] = std::max(poison_bytes[bt.dtype], bt.bytes());
    }
  for (const auto& [dtype, bytes] : poison_bytes) {
    if (bytes == 0) continue;
    CUdeviceptr p = 0;
    CUresult r = d.cuMemAlloc(&p, bytes);
    if (r != CUDA_SUCCESS) {
      fail(Verdict::runtime_error, "cannot allocate the poisoned output source", r, -1);
      return false;
    }
    poison_src[dtype] = p;
    std::vector<char> host(bytes);
    poison(host.data(), bytes, dtype);
    if ((r = d.cuMemcpyHtoD(p, host.data(), bytes)) != CUDA_SUCCESS) {
      fail(Verdict::runtime_error, "uploading the poisoned output source", r, -1);
      return false;
    }
  }
  return true;
}

bool CudaJob::prepare_run(int run, size_t rot) {
  CUresult r = CUDA_SUCCESS;
  if (multi)
    for (size_t i = 0; i < n_positions; ++i) {
      const size_t ti = rotated_tensor(request, rot, static_cast<int>(i));
      const BoundTensor& bt = plan.tensors.at(ti);
      if (bt.role != TensorRole::output || bt.bytes() == 0) continue;
      if ((r = d.cuMemcpyDtoDAsync(buffers[ti], poison_src.at(bt.dtype), bt.bytes(), stream)) != CUDA_SUCCESS) {
        fail(Verdict::runtime_error, "poisoning the outputs", r, -1);
        return false;
      }
    }
  // Scratch zero-filled before every run, as DESIGN.md promises an answer (one buffer for every set).
  for (size_t ti = 0; ti < plan.tensors.size(); ++ti) {
    const BoundTensor& bt = plan.tensors[ti];
    if (bt.role != TensorRole::scratch || bt.bytes() == 0) continue;
    if ((r = d.cuMemsetD8Async(buffers[ti], 0, bt.bytes(), stream)) != CUDA_SUCCESS) {
      fail(Verdict::runtime_error, "zero-filling the scratch", r, -1);
      return false;
    }
  }
  for (const BlockCopy& c : rewrites_for_run(request, targets, run)) {
    const CUdeviceptr base = buffers.at(static_cast<size_t>(c.input));
    if ((r = d.cuMemcpyDtoDAsync(base + c.dst, base + c.src, c.bytes, stream)) != CUDA_SUCCESS) {
      fail(Verdict::runtime_error, "rewriting the inputs", r, -1);
      return false;
    }
  }
  if ((r = d.cuMemsetD8Async(flush, static_cast<unsigned char>(run), flush_bytes, stream)) != CUDA_SUCCESS) {
    fail(Verdict::runtime_error, "flushing the L2 cache", r, -1);
    return false;
  }
  return true;
}

double CudaJob::run_launches(int run, size_t rot, bool mark) {
  CUresult r = CUDA_SUCCESS;
  // The first run synchronises after every launch, so a fault names its launch.
  const bool sync_each = run == 0;
  if ((r = d.cuEventRecord(start, stream)) != CUDA_SUCCESS) {
    fail(Verdict::runtime_error, "cuEventRecord", r, -1);
    return -1;
  }
  for (size_t li = 0; li < plan.launches.size(); ++li) {
    const BoundLaunch& l = plan.launches[li];
    const int ili = static_cast<int>(li);
    if (current_launch) current_launch->store(ili);
    r = d.cuLaunchKernel(fn[li], static_cast<unsigned>(l.grid[0]), static_cast<unsigned>(l.grid[1]),
                         static_cast<unsigned>(l.grid[2]), static_cast<unsigned>(l.block[0]),
                         static_cast<unsigned>(l.block[1]), static_cast<unsigned>(l.block[2]),
                         static_cast<unsigned>(l.shared_bytes), stream, params[li][rot].data(), nullptr);
    if (r != CUDA_SUCCESS) {
      const bool config = r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES ||
                          r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_NOT_FOUND;
      fail(config ? Verdict::launch_error : Verdict::runtime_error,
           launch_name(plan, li) + " with grid " + dims_text(l.grid) + ", block " + dims_text(l.block) + ", " +
               std::to_string(l.shared_bytes) + " bytes of dynamic shared memory could not be launched",
           r, ili);
      return -1;
    }
    if (mark && (r = d.cuEventRecord(marks[li], stream)) != CUDA_SUCCESS) {
      fail(Verdict::runtime_error, "cuEventRecord", r, -1);
      return -1;
    }
    if (sync_each && (r = d.cuStreamSynchronize(stream)) != CUDA_SUCCESS) {
      fail(Verdict::runtime_error, launch_name(plan, li) + " failed", r, ili);
      return -1;
    }
  }
  if ((r = d.cuEventRecord(stop, stream)) != CUDA_SUCCESS) {
    fail(Verdict::runtime_error, "cuEventRecord", r, -1);
    return -1;
  }
  if ((r = d.cuEventSynchronize(stop)) != CUDA_SUCCESS) {
    fail(Verdict::runtime_error,
         "the launch sequence failed" + std::string(plan.launches.size() > 1 ? " (in one of its launches)" : ""), r,
         plan.launches.size() == 1 ? 0 : -1);
    return -1;
  }
  float ms = 0;
  if ((r = d.cuEventElapsedTime(&ms, start, stop)) != CUDA_SUCCESS) {
    fail(Verdict::runtime_error, "cuEventElapsedTime", r, -1);
    return -1;
  }
  for (size_t li = 0; mark && li < plan.launches.size(); ++li) {
    float lms = 0;
    if ((r = d.cuEventElapsedTime(&lms, li ? marks[li - 1] : start, marks[li])) != CUDA_SUCCESS) {
      fail(Verdict::runtime_error, "cuEventElapsedTime", r, -1);
      return -1;
    }
    launch_samples[li].push_back(lms);
  }
  return ms;
}

bool CudaJob::copy_snapshots(int run, size_t rot) {
  if (sample) {  // drawn here as the runs are made (RunRequest::worker_sample_slots)
    const int slot = sample->offer(run);
    if (slot < 0) return true;
    const auto& outs = request.worker_sample_outputs;
    for (size_t j = 0; j < outs.size(); ++j) {
      const size_t src = rotated_tensor(request, rot, outs[j]);
      const size_t dst = static_cast<size_t>(request.worker_sample_first) + static_cast<size_t>(slot) * outs.size() + j;
      const CUresult r = d.cuMemcpyDtoDAsync(buffers.at(dst), buffers.at(src), plan.tensors.at(src).bytes(), stream);
      if (r != CUDA_SUCCESS) {
        fail(Verdict::runtime_error, "copying a checked run's outputs", r, -1);
        return false;
      }
    }
    return true;
  }
  if (const Snapshot* snap = snapshot_for_run(request, run))
    for (const auto& [position, dst] : snap->copies) {
      const size_t src = rotated_tensor(request, rot, position);
      const CUresult r = d.cuMemcpyDtoDAsync(buffers.at(static_cast<size_t>(dst)), buffers.at(src),
                                             plan.tensors.at(src).bytes(), stream);
      if (r != CUDA_SUCCESS) {
        fail(Verdict::runtime_error, "copying a checked run's outputs", r, -1);
        return false;
      }
    }
  return true;
}

bool CudaJob::download() {
  CUresult r = d.cuStreamSynchronize(stream);
  if (r != CUDA_SUCCESS) {
    fail(Verdict::runtime_error, "the launch sequence failed", r, -1);
    return false;
  }
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    const size_t bytes = plan.tensors[i].bytes();
    if (bytes && (r = d.cuMemcpyDtoH(tensors.at(i), buffers[i], bytes)) != CUDA_SUCCESS) {
      fail(Verdict::runtime_error, "copying '" + plan.tensors[i].name + "' back from the GPU", r, -1);
      return false;
    }
  }
  return true;
}

}  // namespace

RunOutcome CudaBackend::execute(const Artifact& artifact, const BoundPlan& plan, const std::vector<void*>& tensors,
                                const RunRequest& request, std::atomic<int>* current_launch) {
  RunOutcome out;
  if (poisoned_) {
    out.verdict = Verdict::runtime_error;
    out.message = "internal: this worker's CUDA context was poisoned by an earlier job";
    return out;
  }
  const CudaDriverApi* dp = nullptr;
  try {
    dp = &cuda_driver();
  } catch (const CudaUnavailableError& e) {
    out.verdict = Verdict::runtime_error;
    out.message = std::string("cannot run cuda code here: ") + e.what();
    return out;
  }
  CudaJob job(*dp, poisoned_, plan, tensors, request, current_launch, out);
  // 1. Context. 2. Module and functions. 3. Device buffers, stream and events. 4. Arguments.
  if (!job.set_up_context(options_.device, ctx_) || !job.load_functions(artifact, arch_) ||
      !job.allocate(options_.l2_flush_bytes))
    return out;
  job.bind_arguments();

  // 5. Runs (env/timing_schedule.hpp). Outside the timed region, on the timing stream: every
  // run of a multi-run job starts from poisoned outputs (copied from one poisoned device buffer
  // per dtype), its inputs are rewritten (env/input_rewrite.hpp), the L2 is flushed; after a
  // checked run its outputs are copied into their snapshot tensors (brought back in step 6).
  if (!job.upload_poison_sources()) return out;
  RunHooks hooks;
  hooks.prepare = [&](int run, size_t rot) { return job.prepare_run(run, rot); };
  hooks.timed = [&](int run, size_t rot) { return job.run_launches(run, rot, false); };
  // The first run (a launch at a time, each followed by a synchronisation) is not profiled.
  if (job.profile) hooks.warmup = [&](int run, size_t rot) { return job.run_launches(run, rot, run > 0); };
  hooks.after = [&](int run, size_t rot) { return job.copy_snapshots(run, rot); };
  const bool completed = run_timing_schedule(request, job.n_rot, hooks, out);
  if (job.sample) out.sampled_runs = job.sample->slot_runs();
  if (!completed) return out;
  if (current_launch) current_launch->store(-1);
  if (job.profile && !job.launch_samples.front().empty())
    for (auto& samples : job.launch_samples) out.launch_ms.push_back(samples.empty() ? 0.0 : util::median(samples));

  // 6. Every tensor back to the shared host memory (inputs too: the verifier checks them).
  job.download();
  return out;
}

}  // namespace leap::env
