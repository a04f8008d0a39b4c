#pragma once
// Input rewrites between timed runs (docs/env.md "Timing"): before each timed run, a few blocks
// of each rewritable input of the run's input set are overwritten with copies of other blocks
// of the same tensor, at positions drawn from a secret seed. The inputs a kernel sees therefore
// never repeat within a timing job, at the same addresses: a result cached between calls
// (keyed on the input pointer, on a few sampled input values, or on a full hash of the inputs)
// is stale or never hits, while values stay in the input's own distribution and range (indices
// stay valid). Worker and verifier compute the same block copies from the seed: the worker
// applies them to the job's buffers, the verifier to its copies of the input sets, and checks
// outputs against the reference on exactly the inputs each checked run was given.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "env/dtype.hpp"

namespace leap::env {

/// One input a rewrite may change.
struct RewriteTarget {
  int input = 0;          ///< position among the task's inputs (0 .. inputs-1)
  size_t numel = 0;       ///< elements
  size_t elem_bytes = 0;  ///< bytes per element
};

/// Copy `bytes` bytes at byte offset `src` of input `input` to byte offset `dst` of the same
/// input (the two ranges never overlap).
struct BlockCopy {
  int input = 0;
  size_t dst = 0;
  size_t src = 0;
  size_t bytes = 0;
};

/// The block copies to apply before run `run` (0-based, warm-up included) of a timing job with
/// rewrite seed `seed` (non-zero): for each target with at least 2 elements, 4 blocks of
/// max(1, numel / 512) elements (about 0.8% of the tensor), sources and destinations drawn
/// from a generator seeded by (seed, run, input). Deterministic in its arguments.
std::vector<BlockCopy> input_rewrites(uint64_t seed, int run, const std::vector<RewriteTarget>& targets);

/// Applies `copies` to host memory: `inputs[c.input]` is the base of input c.input.
void apply_rewrites(const std::vector<BlockCopy>& copies, const std::vector<void*>& inputs);

/// The declared range of a `uniform` input, [low, high): a perturbation draws fresh values in it.
struct UniformBounds {
  double low = 0;
  double high = 0;
};

/// Changes every element of a floating input for run `run` of a timing job with rewrite seed
/// `seed`, so that no result of an earlier call stays useful (issue "Environment V"; docs/env.md
/// "Timing"): every mantissa bit of each element of `data` (`numel` elements of `dtype`) is
/// XOR-ed with a random bit drawn from (seed, run, `position`, its index), so the element keeps
/// its sign and binade (within a factor of 2 of its old value, whatever the number of runs) and
/// its mantissa is uniform in the binade. Flipping only the lowest bits (2^-8 of the value, the
/// first version) let code keep x, f(x) and f'(x) and answer with a Taylor step (4.3x unflagged
/// on tanh against an honest 0.18x). With `bounds` (a uniform input) a redrawn value is kept only
/// inside [low, high) (else the element stays as it was): a binade wholly inside always changes,
/// so a uniform input stays uniform. Zeros, subnormals, infinities and NaNs are unchanged; other
/// dtypes are left alone. A few multiplies an element, vectorised for float32 (a fresh draw of
/// each value was 1.9 ns an element: 16 ms a run on a 33-MB KernelBench input). Deterministic in
/// its arguments: the worker applies it to a job's buffers, the verifier to copies of them.
void perturb_input(uint64_t seed, int run, int position, DType dtype, void* data, size_t numel,
                   const UniformBounds* bounds = nullptr);

}  // namespace leap::env
