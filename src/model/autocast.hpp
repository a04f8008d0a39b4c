#pragma once
// The one autocast guard of the tree: the autocast state of the CPU and CUDA device types as a
// value, and a scope that sets one and puts the previous back (as torch.autocast's enter / exit
// do). Used by generation (the compute dtype), the update (bf16 on CUDA) and activation
// checkpointing (the recomputation in the forward's precision).
#include <ATen/autocast_mode.h>

namespace leap::model {

/// Autocast on / off and its dtype for the CPU and CUDA device types.
struct AutocastState {
  bool cpu = false, cuda = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  /// The current thread's state.
  static AutocastState capture() {
    AutocastState s;
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU);
    s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    return s;
  }
  /// The current state with autocast on for `device` (kCPU or kCUDA; others: unchanged) at `dtype`.
  static AutocastState enabled(c10::DeviceType device, at::ScalarType dtype) {
    AutocastState s = capture();
    if (device == at::kCPU) s.cpu = true, s.cpu_dtype = dtype;
    if (device == at::kCUDA) s.cuda = true, s.cuda_dtype = dtype;
    return s;
  }
  /// Makes this the current thread's state.
  void apply() const {
    at::autocast::set_autocast_enabled(at::kCPU, cpu);
    at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype);
    at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
  }
};

/// Sets `state` for its lifetime and restores what was there before, clearing the cast cache on
/// the way out (as torch.autocast's exit does).
class AutocastScope {
 public:
  explicit AutocastScope(const AutocastState& state) : saved_(AutocastState::capture()) { state.apply(); }
  ~AutocastScope() {
    saved_.apply();
    at::autocast::clear_cache();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  AutocastState saved_;
};

}  // namespace leap::model
