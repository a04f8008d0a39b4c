#pragma once
// Binding a launch plan to concrete values: tensor shapes, launch dims and argument slots.
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "env/launch_plan.hpp"
#include "env/task_interface.hpp"

namespace leap::env {

/// Where a bound tensor comes from.
enum class TensorRole { input, output, scratch };

/// A tensor with a concrete shape.
struct BoundTensor {
  std::string name;
  DType dtype = DType::float32;
  std::vector<int64_t> shape;
  TensorRole role = TensorRole::input;

  /// Number of elements (1 for shape []).
  int64_t numel() const;
  /// Size in bytes (numel * element size).
  size_t bytes() const;
};

/// One resolved argument: a tensor slot, an int64, or a floating-point scalar.
struct BoundArg {
  ArgKind kind = ArgKind::int64;
  int tensor = -1;  ///< index into BoundPlan::tensors for ArgKind::tensor
  int64_t i = 0;    ///< value for ArgKind::int64
  double f = 0;     ///< value for float32 / float64 (float32 is narrowed when passed)
};

/// One launch with concrete dims.
struct BoundLaunch {
  std::string kernel;
  std::array<int64_t, 3> grid{1, 1, 1};   ///< blocks per dim (x, y, z)
  std::array<int64_t, 3> block{1, 1, 1};  ///< threads per block per dim
  int64_t shared_bytes = 0;               ///< dynamic shared memory, bytes
  std::vector<BoundArg> args;
  std::string signature;  ///< as LaunchSpec::signature()
};

/// The concrete buffers and launches of one solution for one set of sizes.
struct BoundPlan {
  std::vector<BoundTensor> tensors;  ///< inputs, then outputs, then scratch, in declaration order
  std::vector<BoundLaunch> launches;

  /// Index of the tensor named `name`, or -1.
  int tensor_index(const std::string& name) const;
};

/// Backend limits checked while binding; a 0 entry means unchecked.
struct LaunchLimits {
  int64_t max_threads_per_block = 0;
  std::array<int64_t, 3> max_block{0, 0, 0};
  std::array<int64_t, 3> max_grid{0, 0, 0};
  int64_t max_shared_bytes = 0;               ///< per block, bytes
  int64_t max_scratch_bytes = int64_t(1) << 32;  ///< all scratch together, bytes
  std::string max_scratch_source;  ///< what sets max_scratch_bytes, for the message ("" = nothing said)
};

/// Evaluates the task's tensor shapes (throws leap::Error: a broken task, not the candidate's
/// fault) and the plan's scratch shapes and launches (throws LaunchError naming the launch, its
/// line and the reason: division by zero, a dim < 1, a limit exceeded, a negative scratch dim,
/// or a kernel that is not in `exports` when `exports` is given).
BoundPlan bind_plan(const LaunchPlan& plan, const TaskInterface& task, const LaunchLimits& limits = {},
                    const std::set<std::string>* exports = nullptr);

}  // namespace leap::env
