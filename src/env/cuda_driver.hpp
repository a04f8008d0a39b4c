#pragma once
// The CUDA driver API, loaded lazily with dlopen("libcuda.so.1"): leap has no link-time dependency
// on the driver, so the binary starts (and does all its CPU work) on a machine without one.
//
// cuda.h is included for its types and prototypes only; every call goes through the function
// pointers of CudaDriverApi. A process that has called cuInit must not fork workers (the child
// inherits a CUDA state it cannot use), so the parent asks about the device through
// probe_cuda_device(), which does the asking in a short-lived child of the zygote (env/zygote.hpp).
#include <cuda.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "util/error.hpp"

namespace leap::env {

/// The driver library is missing or unusable (no NVIDIA driver, no GPU, cuInit failed).
class CudaUnavailableError : public Error {
 public:
  explicit CudaUnavailableError(const std::string& what) : Error(what, 1) {}
};

/// Function pointers of the driver calls leap uses (names as in cuda.h, whose macros select the
/// current versioned symbol, e.g. cuMemAlloc -> cuMemAlloc_v2). Optional entries may be null.
struct CudaDriverApi {
  decltype(&::cuInit) cuInit = nullptr;
  decltype(&::cuDriverGetVersion) cuDriverGetVersion = nullptr;
  decltype(&::cuDeviceGetCount) cuDeviceGetCount = nullptr;
  decltype(&::cuDeviceGet) cuDeviceGet = nullptr;
  decltype(&::cuDeviceGetName) cuDeviceGetName = nullptr;
  decltype(&::cuDeviceGetAttribute) cuDeviceGetAttribute = nullptr;
  decltype(&::cuDeviceTotalMem) cuDeviceTotalMem = nullptr;
  decltype(&::cuDevicePrimaryCtxRetain) cuDevicePrimaryCtxRetain = nullptr;
  decltype(&::cuDevicePrimaryCtxRelease) cuDevicePrimaryCtxRelease = nullptr;
  decltype(&::cuCtxSetCurrent) cuCtxSetCurrent = nullptr;
  decltype(&::cuCtxSynchronize) cuCtxSynchronize = nullptr;
  decltype(&::cuModuleLoadData) cuModuleLoadData = nullptr;
  decltype(&::cuModuleUnload) cuModuleUnload = nullptr;
  decltype(&::cuModuleGetFunction) cuModuleGetFunction = nullptr;
  decltype(&::cuFuncSetAttribute) cuFuncSetAttribute = nullptr;
  decltype(&::cuFuncGetAttribute) cuFuncGetAttribute = nullptr;
  decltype(&::cuFuncGetParamInfo) cuFuncGetParamInfo = nullptr;  ///< optional (driver >= 12.4)
  decltype(&::cuLaunchKernel) cuLaunchKernel = nullptr;
  decltype(&::cuStreamCreate) cuStreamCreate = nullptr;
  decltype(&::cuStreamDestroy) cuStreamDestroy = nullptr;
  decltype(&::cuStreamSynchronize) cuStreamSynchronize = nullptr;
  decltype(&::cuEventCreate) cuEventCreate = nullptr;
  decltype(&::cuEventDestroy) cuEventDestroy = nullptr;
  decltype(&::cuEventRecord) cuEventRecord = nullptr;
  decltype(&::cuEventSynchronize) cuEventSynchronize = nullptr;
  decltype(&::cuEventElapsedTime) cuEventElapsedTime = nullptr;
  decltype(&::cuMemAlloc) cuMemAlloc = nullptr;
  decltype(&::cuMemFree) cuMemFree = nullptr;
  decltype(&::cuMemcpyHtoD) cuMemcpyHtoD = nullptr;
  decltype(&::cuMemcpyDtoH) cuMemcpyDtoH = nullptr;
  decltype(&::cuMemcpyDtoDAsync) cuMemcpyDtoDAsync = nullptr;
  decltype(&::cuMemsetD8Async) cuMemsetD8Async = nullptr;
  decltype(&::cuGetErrorName) cuGetErrorName = nullptr;
  decltype(&::cuGetErrorString) cuGetErrorString = nullptr;
};

/// The loaded driver API (dlopen + dlsym on first call; cuInit not yet called). Thread-safe.
/// Throws CudaUnavailableError naming the library and dlerror() if libcuda.so.1 cannot be
/// loaded or lacks a required symbol.
const CudaDriverApi& cuda_driver();

/// "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)" for `r`.
std::string cuda_error_text(CUresult r);

/// True for errors after which the context is unusable (illegal address, misaligned address,
/// trap, illegal instruction, launch failure, hardware stack error, ...): the process must exit.
bool cuda_error_is_sticky(CUresult r);

/// Throws leap::Error "<what>: <cuda_error_text(r)>" unless r is CUDA_SUCCESS.
void cuda_check(CUresult r, const std::string& what);

/// What leap needs to know about one GPU.
struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;                     ///< e.g. "NVIDIA H200"
  int cc_major = 0, cc_minor = 0;       ///< compute capability
  int sm_count = 0;                     ///< multiprocessors
  int64_t l2_bytes = 0;                 ///< L2 cache size, bytes
  int64_t persisting_l2_max_bytes = 0;  ///< largest persisting-L2 set-aside, bytes
  int64_t total_memory_bytes = 0;       ///< device memory, bytes
  int max_threads_per_block = 0;
  std::array<int64_t, 3> max_block{0, 0, 0};  ///< per-dim block limits (x, y, z)
  std::array<int64_t, 3> max_grid{0, 0, 0};   ///< per-dim grid limits (x, y, z)
  int64_t max_shared_per_block = 0;        ///< without opting in (48 KiB), bytes
  int64_t max_shared_per_block_optin = 0;  ///< with cuFuncSetAttribute, bytes
  int driver_version = 0;                  ///< e.g. 13000 for CUDA 13.0

  /// "sm_90" for compute capability 9.0.
  std::string arch() const;
  /// One line for `leap version` and run records:
  /// "NVIDIA H200, sm_90, 132 SMs, L2 60 MiB, 140 GiB, driver 13.0".
  std::string summary() const;
};

/// Queries device `ordinal` in this process (cuInit, attributes; creates no context). Throws
/// CudaUnavailableError when there is no driver, cuInit fails or the device does not exist.
/// After this call the process must not fork workers (see the file comment).
CudaDeviceInfo query_cuda_device(int ordinal = 0);

/// Runs query_cuda_device in a child of the zygote and returns its answer, so the caller never
/// initialises CUDA; nullopt (with the reason in `*why`) when there is no usable device.
std::optional<CudaDeviceInfo> probe_cuda_device(int ordinal = 0, std::string* why = nullptr);

/// What the probe child computes and sends back: "ok\n" + the device's fields, or "error\n" + the
/// reason. Runs cuInit in the calling process: only for a child of the zygote.
std::string cuda_probe_text(int ordinal);

}  // namespace leap::env
