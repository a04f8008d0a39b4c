#pragma once
// Host memory for a solution's tensors, shared between the parent and a worker process.
#include <sys/types.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "env/binding.hpp"

namespace leap::env {

/// Placement of tensors in one shared mapping. Every tensor ends (up to 64-byte alignment of
/// its start) at a page boundary followed by a guard page, so a write past its end faults in
/// the worker, which maps guard pages PROT_NONE.
struct BufferLayout {
  size_t total_bytes = 0;                            ///< size of the mapping
  std::vector<size_t> offsets;                       ///< tensor start, bytes from mapping start
  std::vector<size_t> bytes;                         ///< tensor size in bytes
  std::vector<std::pair<size_t, size_t>> guards;     ///< (offset, length) of guard pages

  /// Lays out tensors of the given sizes (bytes).
  static BufferLayout make(const std::vector<size_t>& tensor_bytes);
};

/// A memfd-backed mapping holding every tensor of a BoundPlan; its fd is passed to workers.
/// Contents start zeroed. Move-only.
///
/// The memory is recycled: a destroyed SharedBuffers (up to 64 MiB) is kept by the process, up to
/// 256 MiB in all, and handed, zeroed again, to a later one of the same size class, but only once
/// every process it was sent to (sent_to) has exited, all its threads: no code that could still
/// write into it runs anywhere. A fresh memfd for every job cost the parent a page fault for
/// each page it wrote and the freeing of them all, and the worker the allocation behind its
/// populated mapping (bench/env_cpu: the parent's page faults and munmap were 12% of the machine).
class SharedBuffers {
 public:
  /// Creates the mapping for `tensors` (BoundPlan::tensors). Throws leap::Error on failure.
  explicit SharedBuffers(const std::vector<BoundTensor>& tensors);
  ~SharedBuffers();
  SharedBuffers(SharedBuffers&&) noexcept;
  SharedBuffers& operator=(SharedBuffers&&) noexcept;
  SharedBuffers(const SharedBuffers&) = delete;
  SharedBuffers& operator=(const SharedBuffers&) = delete;

  /// Number of tensors.
  size_t size() const { return layout_.offsets.size(); }
  /// Start of tensor i (parent's mapping).
  void* data(size_t i) const;
  /// Typed start of tensor i.
  template <class T>
  T* as(size_t i) const { return static_cast<T*>(data(i)); }
  /// Size of tensor i in bytes.
  size_t bytes(size_t i) const { return layout_.bytes.at(i); }
  /// Zero-fills tensor i.
  void zero(size_t i);
  /// The memfd (owned; do not close).
  int fd() const { return fd_; }
  /// The layout a worker needs to map the same memory.
  const BufferLayout& layout() const { return layout_; }
  /// Notes that process `pid` (a worker) was handed this memory: it is not recycled for another
  /// SharedBuffers until that process has exited.
  void sent_to(pid_t pid);
  /// The processes this memory was sent to (sent_to), in order, none removed (for tests).
  const std::vector<pid_t>& holders() const { return holders_; }
  /// True when this memory was recycled (zeroed again) rather than freshly created (for tests).
  bool recycled() const { return recycled_; }

 private:
  void release();
  BufferLayout layout_;
  int fd_ = -1;
  std::byte* base_ = nullptr;
  size_t capacity_ = 0;         ///< bytes of the memfd and of the parent's mapping (>= layout_.total_bytes)
  size_t used_ = 0;             ///< bytes from the start any use of this memfd mapped (the rest is zero)
  std::vector<pid_t> holders_;  ///< processes handed the memfd
  bool recycled_ = false;
};

/// Whether every thread of process `pid` has exited (a zombie counts as exited; so does a pid
/// that no longer exists). False when that cannot be told (no pidfd_open).
bool process_exited(pid_t pid);

}  // namespace leap::env
