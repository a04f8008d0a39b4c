// c10d rendezvous and the Gloo and NCCL process groups. The only file that includes c10d / Gloo /
// NCCL headers; CMake defines LEAP_HAVE_GLOO=1 and USE_C10D_GLOO here when libgloo-dev's headers
// were found (headers only: the Gloo symbols come from LibTorch's libtorch_cpu.so), and
// LEAP_HAVE_NCCL=1 when the wheel's nvidia/nccl/include/nccl.h was (ProcessGroupNCCL's symbols
// come from libtorch_cuda.so, NCCL's from the libnccl.so.2 it loads).
#include "dist/process_group.hpp"

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "util/error.hpp"

#if LEAP_HAVE_GLOO
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#endif
#if LEAP_HAVE_GLOO && LEAP_HAVE_NCCL
#include <c10/cuda/CUDAFunctions.h>
#include <dlfcn.h>
#include <nccl.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#ifndef LEAP_HAVE_GLOO
#define LEAP_HAVE_GLOO 0
#endif
#ifndef LEAP_HAVE_NCCL
#define LEAP_HAVE_NCCL 0
#endif

namespace leap::dist {

namespace {

std::string env_or(const char* name, const std::string& fallback = "") {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

int env_int(const char* name, bool required, int fallback) {
  const std::string v = env_or(name);
  if (v.empty()) {
    if (required)
      throw ConfigError(std::string("environment variable ") + name +
                        " is not set (a distributed run needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; "
                        "torchrun sets them)");
    return fallback;
  }
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0' || x < 0 || x > 1000000)
    throw ConfigError(std::string("environment variable ") + name + "='" + v + "' is not a non-negative integer");
  return static_cast<int>(x);
}

/// One line of a c10d / Gloo error (their messages carry long C++ backtraces).
std::string first_line(const std::string& what) {
  const auto nl = what.find('\n');
  return nl == std::string::npos ? what : what.substr(0, nl);
}

}  // namespace

Rendezvous rendezvous_from_env() {
  Rendezvous r;
  const std::string ws = env_or("WORLD_SIZE");
  if (ws.empty()) return r;
  r.world_size = env_int("WORLD_SIZE", true, 1);
  if (r.world_size < 1) throw ConfigError("environment variable WORLD_SIZE='" + ws + "' must be at least 1");
  if (r.world_size == 1) return r;
  r.rank = env_int("RANK", true, 0);
  if (r.rank >= r.world_size)
    throw ConfigError("environment variable RANK=" + std::to_string(r.rank) + " is outside [0, WORLD_SIZE=" +
                      std::to_string(r.world_size) + ")");
  r.local_rank = env_int("LOCAL_RANK", false, 0);
  r.master_addr = env_or("MASTER_ADDR");
  if (r.master_addr.empty())
    throw ConfigError("environment variable MASTER_ADDR is not set (the host of rank 0, e.g. 127.0.0.1)");
  r.master_port = env_int("MASTER_PORT", true, 0);
  if (r.master_port < 1 || r.master_port > 65535)
    throw ConfigError("environment variable MASTER_PORT=" + std::to_string(r.master_port) + " is not a port (1..65535)");
  const std::string agent = env_or("TORCHELASTIC_USE_AGENT_STORE");
  r.agent_store = agent == "True" || agent == "true" || agent == "1";
  r.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", false, 0);
  return r;
}

bool nccl_available() { return LEAP_HAVE_GLOO && LEAP_HAVE_NCCL; }

std::string resolve_backend(const std::string& configured, bool cuda) {
  if (configured == "gloo") return "gloo";
  if (configured == "nccl") {
    if (!nccl_available())
      throw ConfigError("key 'dist.backend': nccl is not available in this build (no nccl.h from the wheel's "
                        "nvidia-nccl package at configure time); use dist.backend=gloo or auto (docs/distributed.md)");
    if (!cuda)
      throw ConfigError("key 'dist.backend': nccl needs the policy on a GPU (model.device cuda, or auto with a GPU); "
                        "use dist.backend=gloo or auto on CPUs");
    return "nccl";
  }
  if (configured == "auto") {
    if (cuda && nccl_available()) return "nccl";
    if (cuda)
      spdlog::info("dist.backend=auto: gloo (no NCCL in this build); gradients are reduced through host memory");
    return "gloo";
  }
  throw ConfigError("key 'dist.backend': unknown backend '" + configured + "' (auto, nccl or gloo)");
}

#if LEAP_HAVE_GLOO

bool gloo_available() { return true; }

struct ProcessGroup::Impl {
  Rendezvous rdv;
  std::string backend;
  double timeout_s = 0;
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> pg;
  at::Device device{at::kCPU};  ///< where collectives run: the CPU (gloo) or this rank's GPU (nccl)

  /// Runs one collective and waits for it; a failure or timeout becomes a leap::Error.
  template <class F>
  void run(const char* what, F&& start) {
    try {
      auto work = start();
      work->wait(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
    } catch (const std::exception& e) {
      throw Error("dist: rank " + std::to_string(rdv.rank) + " of " + std::to_string(rdv.world_size) + ": " + what +
                  " failed: another rank died, closed its connection or did not arrive within dist.timeout_s=" +
                  fmt::format("{:g}", timeout_s) + " s (" + first_line(e.what()) + ")");
    }
  }

  /// Runs `op` on `t` where the backend reduces (gloo: the CPU, a CUDA tensor staged through
  /// host memory; nccl: this rank's GPU, a CPU tensor staged through it), then copies back.
  template <class Op>
  void on_device(at::Tensor& t, Op&& op) {
    if (t.device() == device && t.is_contiguous()) {
      op(t);
      return;
    }
    at::Tensor staged = t.to(device).contiguous();
    op(staged);
    t.copy_(staged);
  }
};

namespace {

/// A c10d NCCL backend for this rank's GPU, after checking that the NCCL library loaded at run
/// time has the major.minor version of the header built against. Throws leap::Error.
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, const Rendezvous& rdv,
                                            std::chrono::milliseconds timeout) {
#if LEAP_HAVE_NCCL
  using GetVersion = ncclResult_t (*)(int*);
  auto get = reinterpret_cast<GetVersion>(dlsym(RTLD_DEFAULT, "ncclGetVersion"));
  int runtime = 0;
  if (get == nullptr || get(&runtime) != ncclSuccess)
    throw Error("dist: nccl: libnccl.so.2 is not loaded (LibTorch's CUDA library loads it)");
  if (runtime / 100 != NCCL_VERSION_CODE / 100)
    throw Error("dist: nccl: the NCCL library loaded is " + std::to_string(runtime) + ", leap was built against " +
                std::to_string(NCCL_VERSION_CODE) + " (major and minor must match)");
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(rdv.local_rank));
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rdv.rank, rdv.world_size, opts);
#else
  (void)store, (void)rdv, (void)timeout;
  throw ConfigError("key 'dist.backend': nccl is not available in this build");
#endif
}

/// A c10d Gloo backend over TCP (GLOO_SOCKET_IFNAME, else loopback for a local master, else the
/// host's default interface).
c10::intrusive_ptr<c10d::Backend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store, const Rendezvous& rdv,
                                            std::chrono::milliseconds timeout) {
  auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
  const std::string iface = env_or("GLOO_SOCKET_IFNAME");
  const bool loopback = rdv.master_addr == "localhost" || rdv.master_addr.rfind("127.", 0) == 0;
  if (!iface.empty())
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface));
  else if (loopback)
    opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rdv.rank, rdv.world_size, opts);
}

}  // namespace

std::unique_ptr<ProcessGroup> ProcessGroup::create(const Rendezvous& rdv, const std::string& backend,
                                                   double timeout_s) {
  if (rdv.world_size < 1) throw ConfigError("dist: a process group needs WORLD_SIZE >= 1");
  if (backend != "gloo" && !(backend == "nccl" && nccl_available()))
    throw ConfigError("dist: backend '" + backend + "' is not available (" +
                      (nccl_available() ? "gloo or nccl" : "gloo only in this build") + ")");
  auto impl = std::make_unique<Impl>();
  impl->rdv = rdv;
  impl->backend = backend;
  impl->timeout_s = timeout_s;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(rdv.master_port);
    so.isServer = !rdv.agent_store && rdv.rank == 0;
    so.numWorkers = rdv.agent_store ? std::nullopt : std::optional<std::size_t>(rdv.world_size);
    so.waitWorkers = !rdv.agent_store;
    so.timeout = timeout;
    c10::intrusive_ptr<c10d::Store> tcp = c10::make_intrusive<c10d::TCPStore>(rdv.master_addr, so);
    // The same key space as PyTorch's own rendezvous, so restarts under torchrun never see old keys.
    impl->store = c10::make_intrusive<c10d::PrefixStore>(
        "/leap/attempt_" + std::to_string(rdv.restart_count), tcp);
    if (backend == "nccl") {
      impl->device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rdv.local_rank));
      impl->pg = make_nccl(impl->store, rdv, timeout);
    } else {
      impl->pg = make_gloo(impl->store, rdv, timeout);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("dist: rank " + std::to_string(rdv.rank) + " of " + std::to_string(rdv.world_size) +
                " could not join the process group at " + rdv.master_addr + ":" + std::to_string(rdv.master_port) +
                " within dist.timeout_s=" + fmt::format("{:g}", timeout_s) + " s (" + first_line(e.what()) + ")");
  }
  spdlog::debug("dist: rank {} of {} joined ({} store at {}:{})", rdv.rank, rdv.world_size,
                rdv.agent_store ? "torchrun agent" : (rdv.rank == 0 ? "hosting the" : "client of the"),
                rdv.master_addr, rdv.master_port);
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

void ProcessGroup::all_reduce_sum(at::Tensor& tensor) {
  impl_->on_device(tensor, [&](at::Tensor& t) {
    std::vector<at::Tensor> v{t};
    impl_->run("all_reduce(sum)", [&] { return impl_->pg->allreduce(v); });
  });
}

void ProcessGroup::all_reduce_max(at::Tensor& tensor) {
  impl_->on_device(tensor, [&](at::Tensor& t) {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    impl_->run("all_reduce(max)", [&] { return impl_->pg->allreduce(v, o); });
  });
}

void ProcessGroup::broadcast(at::Tensor& tensor, int root) {
  impl_->on_device(tensor, [&](at::Tensor& t) {
    std::vector<at::Tensor> v{t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    impl_->run("broadcast", [&] { return impl_->pg->broadcast(v, o); });
  });
}

std::vector<std::string> ProcessGroup::all_gather_bytes(const std::string& bytes) {
  const int n = world_size();
  const auto on = [&](at::ScalarType t) { return at::TensorOptions().dtype(t).device(impl_->device); };
  // Lengths first, then every rank's bytes padded to the longest.
  at::Tensor len = at::full({1}, static_cast<int64_t>(bytes.size()), on(at::kLong));
  std::vector<at::Tensor> lens_out;
  for (int i = 0; i < n; ++i) lens_out.push_back(at::zeros({1}, on(at::kLong)));
  {
    std::vector<std::vector<at::Tensor>> out{lens_out};
    std::vector<at::Tensor> in{len};
    impl_->run("all_gather(lengths)", [&] { return impl_->pg->allgather(out, in); });
    lens_out = out[0];
  }
  int64_t longest = 1;
  for (const auto& l : lens_out) longest = std::max<int64_t>(longest, l.item<int64_t>());
  at::Tensor mine = at::zeros({longest}, at::kByte);
  if (!bytes.empty()) std::memcpy(mine.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  std::vector<std::vector<at::Tensor>> out(1);
  for (int i = 0; i < n; ++i) out[0].push_back(at::zeros({longest}, on(at::kByte)));
  std::vector<at::Tensor> in{mine.to(impl_->device)};
  impl_->run("all_gather(bytes)", [&] { return impl_->pg->allgather(out, in); });
  std::vector<std::string> result;
  for (int i = 0; i < n; ++i) {
    const int64_t l = lens_out[static_cast<size_t>(i)].item<int64_t>();
    const at::Tensor got = out[0][static_cast<size_t>(i)].to(at::kCPU);
    result.emplace_back(reinterpret_cast<const char*>(got.data_ptr<uint8_t>()), static_cast<size_t>(l));
  }
  return result;
}

std::string ProcessGroup::broadcast_bytes(const std::string& bytes, int root) {
  at::Tensor len = at::full({1}, static_cast<int64_t>(rank() == root ? bytes.size() : 0), at::kLong);
  broadcast(len, root);
  const int64_t n = len.item<int64_t>();
  at::Tensor buf = at::zeros({std::max<int64_t>(1, n)}, at::kByte);
  if (rank() == root && n) std::memcpy(buf.data_ptr<uint8_t>(), bytes.data(), static_cast<size_t>(n));
  broadcast(buf, root);
  return std::string(reinterpret_cast<const char*>(buf.data_ptr<uint8_t>()), static_cast<size_t>(n));
}

void ProcessGroup::barrier() {
  impl_->run("barrier", [&] { return impl_->pg->barrier(); });
}

#else  // no Gloo headers at build time

bool gloo_available() { return false; }

struct ProcessGroup::Impl {
  Rendezvous rdv;
  std::string backend;
  double timeout_s = 0;
};

std::unique_ptr<ProcessGroup> ProcessGroup::create(const Rendezvous&, const std::string&, double) {
  throw NotBuiltError("dist: this leap was built without c10d's Gloo process group (libgloo-dev's headers were "
                      "missing at configure time: run scripts/setup.sh and rebuild); WORLD_SIZE > 1 needs it");
}
void ProcessGroup::all_reduce_sum(at::Tensor&) { throw NotBuiltError("dist: no process group in this build"); }
void ProcessGroup::all_reduce_max(at::Tensor&) { throw NotBuiltError("dist: no process group in this build"); }
void ProcessGroup::broadcast(at::Tensor&, int) { throw NotBuiltError("dist: no process group in this build"); }
std::vector<std::string> ProcessGroup::all_gather_bytes(const std::string&) {
  throw NotBuiltError("dist: no process group in this build");
}
std::string ProcessGroup::broadcast_bytes(const std::string&, int) {
  throw NotBuiltError("dist: no process group in this build");
}
void ProcessGroup::barrier() { throw NotBuiltError("dist: no process group in this build"); }

#endif

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;
int ProcessGroup::rank() const { return impl_->rdv.rank; }
int ProcessGroup::world_size() const { return impl_->rdv.world_size; }
int ProcessGroup::local_rank() const { return impl_->rdv.local_rank; }
const std::string& ProcessGroup::backend() const { return impl_->backend; }
double ProcessGroup::timeout_s() const { return impl_->timeout_s; }

std::vector<double> ProcessGroup::all_reduce_sum(const std::vector<double>& values) {
  at::Tensor t = at::tensor(values, at::kDouble);
  if (values.empty()) return {};
  all_reduce_sum(t);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

std::vector<double> ProcessGroup::all_reduce_max(const std::vector<double>& values) {
  at::Tensor t = at::tensor(values, at::kDouble);
  if (values.empty()) return {};
  all_reduce_max(t);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

}  // namespace leap::dist
