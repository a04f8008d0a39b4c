#include "model/cuda_decode.hpp"

#include <torch/torch.h>

#if LEAP_HAVE_NVRTC && __has_include(<ATen/cuda/CUDAGraph.h>) && __has_include(<ATen/cuda/CUDAEvent.h>)
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#define LEAP_CUDA_GRAPHS 1
#else
#define LEAP_CUDA_GRAPHS 0
#endif

#include "util/error.hpp"

namespace leap::model {

#if LEAP_CUDA_GRAPHS

struct DecodeGraph::Impl {
  int64_t window = -1;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  at::Tensor out;
};

at::Tensor DecodeGraph::run(int64_t window, const std::function<at::Tensor(int64_t)>& step) {
  if (!device_.is_cuda()) throw ModelError("decode graph: CUDA graphs need a CUDA device");
  if (window != impl_->window) {
    impl_->graph.reset();
    impl_->out = at::Tensor();
    c10::cuda::CUDAGuard device_guard(device_);
    auto current = c10::cuda::getCurrentCUDAStream();
    auto side = c10::cuda::getStreamFromPool(false, device_.index());
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(side);
    {
      c10::cuda::CUDAStreamGuard on_side(side);
      step(window);  // warm-up: lazy initialisation (cuBLAS workspaces, kernels) outside the capture
      auto graph = std::make_unique<at::cuda::CUDAGraph>();
      // Thread-local capture mode: another thread of the process (a grader) may use CUDA meanwhile.
      graph->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        impl_->out = step(window);
      } catch (...) {
        // End the capture (and the allocator's routing into its pool) before the caller goes on.
        try {
          graph->capture_end();
        } catch (...) {
        }
        impl_->out = at::Tensor();
        throw;
      }
      graph->capture_end();
      impl_->graph = std::move(graph);
    }
    at::cuda::CUDAEvent captured;
    captured.record(side);
    captured.block(current);
    impl_->window = window;
    ++captures_;
  }
  impl_->graph->replay();
  return impl_->out;
}

struct HostCopy::Impl {
  at::cuda::CUDAEvent done;
};

HostCopy::HostCopy(int64_t rows, const c10::Device& device) {
  auto host = torch::TensorOptions().device(torch::kCPU).pinned_memory(device.is_cuda());
  tokens_ = at::empty({rows}, host.dtype(torch::kInt64));
  logprobs_ = at::empty({rows}, host.dtype(torch::kFloat32));
  if (device.is_cuda()) impl_ = std::make_unique<Impl>();
}

void HostCopy::push(const at::Tensor& tokens, const at::Tensor& logprobs) {
  tokens_.copy_(tokens, /*non_blocking=*/impl_ != nullptr);
  logprobs_.copy_(logprobs, /*non_blocking=*/impl_ != nullptr);
  if (impl_) impl_->done.record(c10::cuda::getCurrentCUDAStream(tokens.device().index()));
}

std::pair<at::Tensor, at::Tensor> HostCopy::wait() {
  if (impl_) impl_->done.synchronize();
  return {tokens_, logprobs_};
}

#else  // built without the CUDA headers: no graphs, synchronous copies

struct DecodeGraph::Impl {};

at::Tensor DecodeGraph::run(int64_t, const std::function<at::Tensor(int64_t)>&) {
  throw ModelError("decode graph: this leap was built without CUDA graph support");
}

struct HostCopy::Impl {};

HostCopy::HostCopy(int64_t rows, const c10::Device&) {
  tokens_ = at::empty({rows}, torch::kInt64);
  logprobs_ = at::empty({rows}, torch::kFloat32);
}

void HostCopy::push(const at::Tensor& tokens, const at::Tensor& logprobs) {
  tokens_.copy_(tokens);
  logprobs_.copy_(logprobs);
}

std::pair<at::Tensor, at::Tensor> HostCopy::wait() { return {tokens_, logprobs_}; }

#endif

DecodeGraph::DecodeGraph(const c10::Device& device) : impl_(std::make_unique<Impl>()), device_(device) {}
DecodeGraph::~DecodeGraph() = default;
HostCopy::~HostCopy() = default;

}  // namespace leap::model
