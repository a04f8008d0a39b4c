#pragma once
// The two passes of compare_output's passing case (env/reference.hpp) over float32 or float64
// elements, in plain vectorised loops (no torch): the parent runs them on every checked run's
// outputs, thousands of times a CPU-time check job.
#include <cstddef>
#include <cstdint>

namespace leap::env {

/// The sum of squares of the finite elements of `ref` (`n` elements, summed in double in eight
/// lanes: the order differs from a plain loop in the last bits) and their count in `*finite`.
double finite_sum_squares(const float* ref, size_t n, int64_t* finite);
double finite_sum_squares(const double* ref, size_t n, int64_t* finite);

/// True when every element k of `got` passes against `ref` (`n` elements each): a finite ref_k
/// when |got_k - ref_k| <= atol_eff + rtol * |ref_k| (in double), a NaN ref_k when got_k is NaN,
/// an infinite ref_k when got_k equals it. When true, `*max_index` is the first index of the
/// largest finite |got_k - ref_k| (a matched non-finite pair counts 0; -1 when n is 0); when
/// false it is unspecified (the tensor path describes the failure).
bool within_tolerance(const float* got, const float* ref, size_t n, double atol_eff, double rtol, int64_t* max_index);
bool within_tolerance(const double* got, const double* ref, size_t n, double atol_eff, double rtol, int64_t* max_index);

}  // namespace leap::env
