#pragma once
// Data-parallel process groups over LibTorch's c10d (DESIGN.md section 6; docs/distributed.md).
// Rendezvous reads the variables torchrun (or mpirun / srun wrappers) set: RANK, WORLD_SIZE,
// LOCAL_RANK, MASTER_ADDR, MASTER_PORT. The c10d and Gloo headers stay inside src/dist/*.cpp;
// this header only needs ATen's Tensor.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace leap::dist {

/// Where this process sits in a data-parallel job, as the launcher described it.
struct Rendezvous {
  int rank = 0;               ///< global rank, 0 .. world_size-1 (RANK)
  int world_size = 1;         ///< number of processes (WORLD_SIZE); 1 = not distributed
  int local_rank = 0;         ///< rank on this machine = its GPU ordinal (LOCAL_RANK; default 0)
  std::string master_addr;    ///< host of the TCP store (MASTER_ADDR)
  int master_port = 0;        ///< port of the TCP store (MASTER_PORT)
  bool agent_store = false;   ///< torchrun's agent already hosts the store (TORCHELASTIC_USE_AGENT_STORE=True)
  int restart_count = 0;      ///< torchrun restart attempt (TORCHELASTIC_RESTART_COUNT), keys the store prefix
};

/// Reads the rendezvous variables. WORLD_SIZE unset, empty or 1 gives a one-process Rendezvous
/// (no other variable is read). Otherwise RANK, MASTER_ADDR and MASTER_PORT are required.
/// Throws leap::ConfigError naming the variable when one is missing or malformed (not an
/// integer, RANK outside [0, WORLD_SIZE), port outside 1..65535).
Rendezvous rendezvous_from_env();

/// The backend a configured `dist.backend` (auto | nccl | gloo) resolves to in this build, with
/// the policy on a GPU (`cuda`) or not: `auto` is "nccl" on a GPU when this build has NCCL, else
/// "gloo" (on a GPU it then logs that gradients travel through host memory); `nccl` without a
/// GPU, or in a build without NCCL, throws leap::ConfigError naming `dist.backend`.
std::string resolve_backend(const std::string& configured, bool cuda);
/// True when this binary was built with c10d's NCCL process group (the wheel's nccl.h found at
/// configure time, and Gloo's headers: the same file builds both).
bool nccl_available();

/// True when this binary was built with c10d's Gloo process group (libgloo-dev headers found at
/// configure time). Without it, ProcessGroup::create throws leap::NotBuiltError.
bool gloo_available();

/// A c10d process group over all ranks of the job. Every collective blocks until every rank has
/// called it (calls must match in order and shape on every rank) and throws leap::Error naming
/// this rank and the operation when a peer died, closed its connection or did not arrive within
/// the timeout. Tensors may live on the CPU or a CUDA device: Gloo reduces on the CPU (CUDA
/// tensors are staged through host memory), NCCL on this rank's GPU (CPU tensors are staged
/// through it; GPU tensors go as they are).
class ProcessGroup {
 public:
  /// Connects to the job: rank 0 hosts a c10d TCPStore at MASTER_ADDR:MASTER_PORT (unless
  /// torchrun's agent hosts it; then every rank is a client), then every rank joins a Gloo
  /// process group. `timeout_s` (dist.timeout_s) bounds the store connection and every
  /// collective. `backend` is "gloo" or "nccl" (see resolve_backend; nccl: this rank's GPU is
  /// LOCAL_RANK, collectives run on device tensors, and the NCCL library loaded must have the
  /// major.minor version of the header built against). World size 1 is allowed (a smoke test).
  /// Throws leap::ConfigError for another backend, leap::NotBuiltError without Gloo in this
  /// build and leap::Error when the rendezvous fails or times out (or the NCCL versions differ).
  static std::unique_ptr<ProcessGroup> create(const Rendezvous& rdv, const std::string& backend, double timeout_s);
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int world_size() const;
  int local_rank() const;
  /// "gloo".
  const std::string& backend() const;
  /// The collective timeout in seconds.
  double timeout_s() const;

  /// In-place element-wise sum over all ranks; any dtype Gloo reduces (float, double, int64...).
  void all_reduce_sum(at::Tensor& tensor);
  /// In-place element-wise maximum over all ranks.
  void all_reduce_max(at::Tensor& tensor);
  /// Sum over all ranks of each value (one fp64 all-reduce).
  std::vector<double> all_reduce_sum(const std::vector<double>& values);
  /// Maximum over all ranks of each value (one fp64 all-reduce).
  std::vector<double> all_reduce_max(const std::vector<double>& values);
  /// In place: every rank receives `root`'s tensor (same shape and dtype on every rank).
  void broadcast(at::Tensor& tensor, int root);
  /// `root`'s bytes on every rank (the argument is ignored on the other ranks).
  std::string broadcast_bytes(const std::string& bytes, int root);
  /// Every rank's bytes, indexed by rank (lengths may differ).
  std::vector<std::string> all_gather_bytes(const std::string& bytes);
  /// Waits until every rank has arrived.
  void barrier();

 private:
  struct Impl;
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace leap::dist
