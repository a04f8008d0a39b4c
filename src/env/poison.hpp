#pragma once
// The values an output holds before a run, so an element the code does not write is seen.
#include <cstddef>

#include "env/binding.hpp"

namespace leap::env {

/// Fills `bytes` at `data` (a tensor of `dtype`) with its poison: NaN for floating types, the
/// type's minimum for signed integers, byte 0xA5 for uint8 and bool. The verifier's pre-fill and
/// the workers' fill before every timed run (the code must compute every run, docs/env.md).
void poison(void* data, size_t bytes, DType dtype);

}  // namespace leap::env
