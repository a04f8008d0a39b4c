#pragma once
// The CUDA pieces of the static-shape decode loop (issue 48): a decode step captured in a CUDA
// graph per attention window and replayed, and the step's tokens copied to the host through
// pinned memory. Built without CUDA, or used on a CPU, they run the step eagerly and copy
// synchronously.
#include <functional>
#include <memory>
#include <utility>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace leap::model {

/// A decode step replayed from a CUDA graph. run(window, step) captures `step(window)` (after one
/// eager warm-up run on a side stream) the first time a window is seen, then replays it; the
/// step must read and write only tensors that stay in place between calls (inputs updated with
/// copy_ / add_ / index_fill_, the KV cache) and must not synchronize with the host. Windows are
/// expected to grow: a new window drops the previous graph and its memory pool.
class DecodeGraph {
 public:
  explicit DecodeGraph(const c10::Device& device);
  ~DecodeGraph();
  DecodeGraph(const DecodeGraph&) = delete;
  DecodeGraph& operator=(const DecodeGraph&) = delete;
  /// The step's output (the same tensor at every replay of one window: read it before the next
  /// run). Throws ModelError when CUDA graphs are unavailable (a CPU device, a build without
  /// CUDA) and c10::Error when capture fails.
  at::Tensor run(int64_t window, const std::function<at::Tensor(int64_t)>& step);
  /// How many graphs were captured so far (one per window seen).
  int64_t captures() const { return captures_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  c10::Device device_;
  int64_t captures_ = 0;
};

/// One decode step's tokens and log-probs on their way to the host: push() queues the copies
/// (non-blocking into pinned memory on a GPU), wait() returns the host tensors once they landed,
/// so the host can queue the next step before it reads this one. One copy in flight at a time.
class HostCopy {
 public:
  /// For `rows` rows on `device`.
  HostCopy(int64_t rows, const c10::Device& device);
  ~HostCopy();
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;
  /// Queues the copy of `tokens` [rows] int64 and `logprobs` [rows] fp32.
  void push(const at::Tensor& tokens, const at::Tensor& logprobs);
  /// Waits for the last push; (tokens [rows] int64, log-probs [rows] fp32) on the CPU, valid
  /// until the next push.
  std::pair<at::Tensor, at::Tensor> wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  at::Tensor tokens_, logprobs_;
};

}  // namespace leap::model
