#include "env/cuda_driver.hpp"
#include "env/zygote.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <sstream>

namespace leap::env {

namespace {

#define LEAP_STR2(x) #x
#define LEAP_STR(x) LEAP_STR2(x)  // expands cuda.h's macros first: cuMemAlloc -> "cuMemAlloc_v2"

struct Loaded {
  CudaDriverApi api;
  std::string error;  // why loading failed; empty when loaded
};

Loaded load_driver() {
  Loaded l;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    l.error = std::string("no CUDA driver: cannot load libcuda.so.1 (") + (e ? e : "unknown error") +
              "); the cuda backend needs an NVIDIA GPU and its driver";
    return l;
  }
  std::string missing;
  auto sym = [&](const char* name, bool required) -> void* {
    void* p = dlsym(h, name);
    if (!p && required) missing += std::string(missing.empty() ? "" : ", ") + name;
    return p;
  };
#define LEAP_LOAD(fn, required) l.api.fn = reinterpret_cast<decltype(l.api.fn)>(sym(LEAP_STR(fn), required))
  LEAP_LOAD(cuInit, true);
  LEAP_LOAD(cuDriverGetVersion, true);
  LEAP_LOAD(cuDeviceGetCount, true);
  LEAP_LOAD(cuDeviceGet, true);
  LEAP_LOAD(cuDeviceGetName, true);
  LEAP_LOAD(cuDeviceGetAttribute, true);
  LEAP_LOAD(cuDeviceTotalMem, true);
  LEAP_LOAD(cuDevicePrimaryCtxRetain, true);
  LEAP_LOAD(cuDevicePrimaryCtxRelease, true);
  LEAP_LOAD(cuCtxSetCurrent, true);
  LEAP_LOAD(cuCtxSynchronize, true);
  LEAP_LOAD(cuModuleLoadData, true);
  LEAP_LOAD(cuModuleUnload, true);
  LEAP_LOAD(cuModuleGetFunction, true);
  LEAP_LOAD(cuFuncSetAttribute, true);
  LEAP_LOAD(cuFuncGetAttribute, true);
  LEAP_LOAD(cuFuncGetParamInfo, false);
  LEAP_LOAD(cuLaunchKernel, true);
  LEAP_LOAD(cuStreamCreate, true);
  LEAP_LOAD(cuStreamDestroy, true);
  LEAP_LOAD(cuStreamSynchronize, true);
  LEAP_LOAD(cuEventCreate, true);
  LEAP_LOAD(cuEventDestroy, true);
  LEAP_LOAD(cuEventRecord, true);
  LEAP_LOAD(cuEventSynchronize, true);
  LEAP_LOAD(cuEventElapsedTime, true);
  LEAP_LOAD(cuMemAlloc, true);
  LEAP_LOAD(cuMemFree, true);
  LEAP_LOAD(cuMemcpyHtoD, true);
  LEAP_LOAD(cuMemcpyDtoH, true);
  LEAP_LOAD(cuMemcpyDtoDAsync, true);
  LEAP_LOAD(cuMemsetD8Async, true);
  LEAP_LOAD(cuGetErrorName, true);
  LEAP_LOAD(cuGetErrorString, true);
#undef LEAP_LOAD
  if (!missing.empty()) {
    l.error = "the CUDA driver (libcuda.so.1) is too old: it lacks " + missing;
    l.api = CudaDriverApi{};
  }
  return l;  // the handle stays open for the life of the process
}

void attr(const CudaDriverApi& d, CUdevice dev, CUdevice_attribute a, int& out) {
  cuda_check(d.cuDeviceGetAttribute(&out, a, dev), "cuDeviceGetAttribute");
}

std::string serialize(const CudaDeviceInfo& i) {
  std::ostringstream s;
  s << i.ordinal << "\n" << i.cc_major << " " << i.cc_minor << " " << i.sm_count << " " << i.l2_bytes << " "
    << i.persisting_l2_max_bytes << " " << i.total_memory_bytes << " " << i.max_threads_per_block << " "
    << i.max_block[0] << " " << i.max_block[1] << " " << i.max_block[2] << " " << i.max_grid[0] << " "
    << i.max_grid[1] << " " << i.max_grid[2] << " " << i.max_shared_per_block << " " << i.max_shared_per_block_optin
    << " " << i.driver_version << "\n"
    << i.name;
  return s.str();
}

bool deserialize(const std::string& text, CudaDeviceInfo& i) {
  std::istringstream s(text);
  s >> i.ordinal >> i.cc_major >> i.cc_minor >> i.sm_count >> i.l2_bytes >> i.persisting_l2_max_bytes >>
      i.total_memory_bytes >> i.max_threads_per_block >> i.max_block[0] >> i.max_block[1] >> i.max_block[2] >>
      i.max_grid[0] >> i.max_grid[1] >> i.max_grid[2] >> i.max_shared_per_block >> i.max_shared_per_block_optin >>
      i.driver_version;
  if (!s) return false;
  s.ignore(1);
  std::getline(s, i.name);
  return true;
}

}  // namespace

const CudaDriverApi& cuda_driver() {
  static Loaded loaded = load_driver();  // thread-safe one-time initialisation
  if (!loaded.error.empty()) throw CudaUnavailableError(loaded.error);
  return loaded.api;
}

std::string cuda_error_text(CUresult r) {
  const char* name = nullptr;
  const char* desc = nullptr;
  try {
    const CudaDriverApi& d = cuda_driver();
    d.cuGetErrorName(r, &name);
    d.cuGetErrorString(r, &desc);
  } catch (const CudaUnavailableError&) {
  }
  std::string s = name ? name : "CUDA error " + std::to_string(static_cast<int>(r));
  if (desc) s += std::string(" (") + desc + ")";
  return s;
}

bool cuda_error_is_sticky(CUresult r) {
  switch (r) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
    case CUDA_ERROR_UNKNOWN:
      return true;
    default:
      return false;
  }
}

void cuda_check(CUresult r, const std::string& what) {
  if (r != CUDA_SUCCESS) throw Error(what + ": " + cuda_error_text(r));
}

std::string CudaDeviceInfo::arch() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }

std::string CudaDeviceInfo::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s, %s, %d SMs, L2 %.0f MiB, %.0f GiB, driver %d.%d", name.c_str(), arch().c_str(),
                sm_count, l2_bytes / 1048576.0, total_memory_bytes / 1073741824.0, driver_version / 1000,
                (driver_version % 1000) / 10);
  return buf;
}

CudaDeviceInfo query_cuda_device(int ordinal) {
  const CudaDriverApi& d = cuda_driver();
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) throw CudaUnavailableError("no usable GPU: cuInit failed: " + cuda_error_text(r));
  int count = 0;
  r = d.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count <= ordinal)
    throw CudaUnavailableError("no GPU " + std::to_string(ordinal) + ": the driver sees " + std::to_string(count) +
                               " device(s)");
  CUdevice dev = 0;
  cuda_check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet");
  CudaDeviceInfo i;
  i.ordinal = ordinal;
  char name[256] = {0};
  cuda_check(d.cuDeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName");
  i.name = name;
  int v = 0;
  attr(d, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, i.cc_major);
  attr(d, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, i.cc_minor);
  attr(d, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, i.sm_count);
  attr(d, dev, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, v);
  i.l2_bytes = v;
  attr(d, dev, CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, v);
  i.persisting_l2_max_bytes = v;
  attr(d, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, i.max_threads_per_block);
  const CUdevice_attribute block[3] = {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
                                       CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z};
  const CUdevice_attribute grid[3] = {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
                                      CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z};
  for (int k = 0; k < 3; ++k) {
    attr(d, dev, block[k], v);
    i.max_block[k] = v;
    attr(d, dev, grid[k], v);
    i.max_grid[k] = v;
  }
  attr(d, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, v);
  i.max_shared_per_block = v;
  attr(d, dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, v);
  i.max_shared_per_block_optin = v;
  size_t mem = 0;
  cuda_check(d.cuDeviceTotalMem(&mem, dev), "cuDeviceTotalMem");
  i.total_memory_bytes = static_cast<int64_t>(mem);
  cuda_check(d.cuDriverGetVersion(&i.driver_version), "cuDriverGetVersion");
  return i;
}

std::string cuda_probe_text(int ordinal) {
  try {
    return "ok\n" + serialize(query_cuda_device(ordinal));
  } catch (const std::exception& e) {
    return std::string("error\n") + e.what();
  }
}

std::optional<CudaDeviceInfo> probe_cuda_device(int ordinal, std::string* why) {
  auto fail = [&](const std::string& w) -> std::optional<CudaDeviceInfo> {
    if (why) *why = w;
    return std::nullopt;
  };
  // Without the driver library there is nothing to ask; say so without starting a process.
  try {
    cuda_driver();
  } catch (const CudaUnavailableError& e) {
    return fail(e.what());
  }
  // Asked in a child of the zygote (an exec-started leap with no CUDA state), so a parent that has
  // already started CUDA (a policy on the GPU) can still probe.
  std::string text;
  try {
    text = Zygote::with_libtorch().call("cuda_probe", std::to_string(ordinal), 120);  // cuInit can be slow
  } catch (const std::exception& e) {
    return fail(std::string("the device probe failed: ") + e.what());
  }
  if (text.rfind("ok\n", 0) == 0) {
    CudaDeviceInfo info;
    if (deserialize(text.substr(3), info)) return info;
    return fail("the device probe returned garbled data");
  }
  if (text.rfind("error\n", 0) == 0) return fail(text.substr(6));
  return fail("the device probe process died before answering");
}

}  // namespace leap::env
