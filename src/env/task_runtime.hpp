#pragma once
// A task made ready for one backend: the TaskInterface a launch plan binds against (sizes with the
// backend's overrides), the concrete tensor shapes, and the compiled TorchScript reference.
// Torch-free header: the reference lives behind a pointer (see env/reference.hpp).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "env/task_interface.hpp"
#include "tasks/task_spec.hpp"

namespace leap::env {

struct Reference;  // env/reference.hpp

/// The most bytes a task's inputs and outputs may take together at a backend's sizes (and never
/// more than half of the machine's memory): larger sizes are a task-file error, not an
/// allocation failure in the reference.
inline constexpr double kMaxTaskTensorBytes = 64e9;

/// A TaskSpec prepared for a backend. Immutable after construction; safe to share between threads
/// for reading (the reference itself is called by one thread at a time, see Verifier).
class RuntimeTask {
 public:
  /// Resolves sizes for `backend`, evaluates every shape, and compiles the reference
  /// (torch::jit::compile of the source, or torch::jit::load of the file). Throws leap::Error
  /// naming the task file and what is wrong (a TorchScript error, a bad shape expression), or
  /// when the task has no sizes for `backend` (`sizes_cpu: none`: TaskSpec::runs_on), or when its
  /// tensors at those sizes exceed kMaxTaskTensorBytes (naming the sizes key).
  RuntimeTask(tasks::TaskSpec spec, const std::string& backend);
  ~RuntimeTask();
  RuntimeTask(const RuntimeTask&) = delete;
  RuntimeTask& operator=(const RuntimeTask&) = delete;

  const tasks::TaskSpec& spec() const { return spec_; }
  const std::string& name() const { return spec_.name; }
  const std::string& backend() const { return backend_; }
  /// What launch plans are checked and bound against.
  const TaskInterface& interface() const { return interface_; }
  /// Concrete shapes of the inputs / outputs, in declaration order.
  const std::vector<std::vector<int64_t>>& input_shapes() const { return input_shapes_; }
  const std::vector<std::vector<int64_t>>& output_shapes() const { return output_shapes_; }
  /// The compiled reference.
  const Reference& reference() const { return *reference_; }

 private:
  tasks::TaskSpec spec_;
  std::string backend_;
  TaskInterface interface_;
  std::vector<std::vector<int64_t>> input_shapes_, output_shapes_;
  std::unique_ptr<Reference> reference_;
  void check_tensor_bytes() const;
};

}  // namespace leap::env
