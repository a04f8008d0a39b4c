#pragma once
// The tensor side of a task: the TorchScript reference, random inputs, and the scale-aware output
// comparison (docs/env.md "Correctness"). Includes LibTorch; only the verifier and validation use it.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "env/dtype.hpp"
#include "env/task_runtime.hpp"

namespace leap::env {

/// The compiled reference of one task (parent process only).
struct Reference {
  struct Impl;
  std::shared_ptr<Impl> impl;
  std::string file;  ///< the task file, for messages

  /// Runs the reference on `inputs` (not modified: it gets clones) with TF32 off and grad off.
  /// Checks the result against the declared outputs (count, dtype, shape); throws leap::Error
  /// naming the task file otherwise.
  std::vector<torch::Tensor> run(const RuntimeTask& task, const std::vector<torch::Tensor>& inputs) const;

  /// Calls the reference on `args` as given (no clones, no output checks; grad and TF32 modes
  /// are the caller's) and returns the tensors of its result, on the device the inputs are on.
  /// Throws leap::Error naming `file` when it fails or returns something other than a Tensor, a
  /// tuple of Tensors or a list of Tensors.
  std::vector<torch::Tensor> call(std::vector<c10::IValue> args) const;

  /// Devices written into the reference as constants (a torch.jit.trace records
  /// `torch.zeros(n, device=x.device)` as device 'cpu' when traced on the CPU): one line per
  /// constant, "device 'cpu' in aten::zeros". Such a reference cannot follow its inputs to the
  /// GPU (its results land on the baked device, or the call fails), so `leap tasks validate`
  /// flags it (baked_device). Looks through calls of submodules and functions (inlined copy).
  std::vector<std::string> baked_devices() const;
};

/// Time limit of one reference call in this process, seconds (`env.reference_timeout_s`; <= 0:
/// none). A call past it ends the process with an error naming the task (util::fatal_exit, which
/// marks a training run failed): a TorchScript call cannot be interrupted, and a hang of leap is
/// worse. Default 300 s.
void set_reference_time_limit(double seconds);

/// Turns off the TorchScript fusers for every reference this process runs (process-wide switches;
/// compile_reference calls it): the TensorExpr fuser (NNC, on by default; it fuses pointwise chains
/// on the GPU) and the legacy fuser on the CPU and GPU. The oneDNN graph fuser is off by default and
/// leap never turns it on. The profiling executor's other passes (constant folding, dead code,
/// shape specialisation) stay: they launch no other kernels. So a reference runs one kernel per
/// op, as eager PyTorch runs the problem, and a speedup is over eager PyTorch, as KernelBench
/// measures it (docs/kernelbench.md "Reference timing").
void use_unfused_references();

/// Compiles a reference: the TorchScript `torchscript` source (torch.nn.functional / F. calls
/// rewritten to the ATen builtins) defining `reference`, or, when the source is empty, the
/// TorchScript module `file` (method `reference`, else `forward`). With `n_inputs` >= 0 the
/// source's `reference` must take that many arguments. Throws leap::Error starting with `where`
/// ("task.yaml:12: reference") when it does not compile or load. `Reference::file` is `task_file`.
Reference compile_reference(const std::string& torchscript, const std::string& file, const std::string& where,
                            const std::string& task_file, int n_inputs = -1);

/// torch scalar type of a task dtype.
torch::ScalarType torch_dtype(DType t);

/// Input distributions the verifier cycles through (a `strict` input always keeps `declared`).
enum class InputVariant { declared = 0, signed_normal = 1, uniform = 2, large_magnitude = 3 };
/// Name of a variant, for feedback ("signed normal", ...).
std::string to_string(InputVariant v);
/// The variant input `input_index` gets for correctness seed `seed_index`: seed 0 is the declared
/// distribution for every input; later seeds mix the others across inputs.
InputVariant variant_for(int seed_index, int input_index);

/// Fresh random inputs for `task` from generator seed `seed`; non-strict floating inputs use the
/// variant given by `variant_for(seed_index, i)` (seed_index < 0: all declared). Inputs with
/// `init: {file: ...}` get the file's fixed values on every seed (see load_fixed_input).
std::vector<torch::Tensor> make_inputs(const RuntimeTask& task, uint64_t seed, int seed_index);

/// A fixed-value input: the raw little-endian values of `dtype` in `file`, shaped `shape` (read
/// once per process, then cloned; at most 256 MiB of such values stay cached, the rest is read
/// again). Throws leap::Error naming `where` and the file when it cannot be read or its size is
/// not numel * element size.
torch::Tensor load_fixed_input(const std::string& file, const std::vector<int64_t>& shape, DType dtype,
                               const std::string& where);

/// Result of comparing one output with its reference.
struct Comparison {
  bool ok = true;
  int64_t numel = 0;
  int64_t mismatches = 0;
  double max_abs_error = 0;   ///< over all elements (NaN if the candidate wrote NaN where a number was due)
  int64_t max_index = -1;     ///< flat index of the largest error
  int64_t first_bad = -1;     ///< flat index of the first mismatch
  double first_expected = 0, first_got = 0;
  double atol_eff = 0;        ///< the absolute tolerance actually used
  double ref_rms = 0;         ///< typical magnitude of the reference
};

/// Fraction of the reference's rms that caps the absolute tolerance (see docs/env.md).
inline constexpr double kAtolRmsFraction = 0.1;

/// Compares `got` with `ref` (same shape): integers and bools exactly; a floating element k passes
/// when |got_k - ref_k| <= atol_eff + rtol * |ref_k| with
///   atol_eff = min(atol * max(1, s) * max(1, rms(ref) / s), 0.1 * rms(ref))
/// where rms is over the reference's finite elements (finite_rms: scaled when the squares leave
/// double's range) and s = `declared_rms`, the rms of the same
/// output for inputs from the declared distributions (<= 0: unknown, s = rms(ref)). atol counts in
/// units of the output's own scale when that is above 1 (the rounding error of an fp32 reduction
/// grows with its magnitude: a [64, 4096] x [4096, 64] product of N(0, 1) values has rms 64), and
/// grows with outputs larger than that scale (large-magnitude inputs); the cap makes an all-zeros
/// or constant output fail however small the true values are. A non-finite reference element must
/// be matched exactly (NaN by NaN).
/// float32 and float64 outputs that pass are decided in one plain loop; a failure, and other
/// dtypes, go through compare_output_tensors, which gives the same result in tensor ops.
Comparison compare_output(const torch::Tensor& got, const torch::Tensor& ref, double atol, double rtol,
                          double declared_rms = 0);

/// compare_output in tensor ops (double precision) for any dtype: its path for failures and for
/// dtypes other than float32 / float64, and the oracle its loop is tested against.
Comparison compare_output_tensors(const torch::Tensor& got, const torch::Tensor& ref, double atol, double rtol,
                                  double declared_rms = 0);

/// Root mean square of the finite elements of `t` (0 if none); computed on the elements scaled
/// by the largest when their squares leave double's range (float64 elements above ~1e145).
double finite_rms(const torch::Tensor& t);

/// "[i, j, k]" for flat index `flat` of `shape`.
std::string index_text(int64_t flat, const std::vector<int64_t>& shape);

}  // namespace leap::env
