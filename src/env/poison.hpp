#pragma once
// The values an output holds before a run, so an element the code does not write is seen.
#include <cstddef>

#include "env/binding.hpp"

namespace leap::env {

/// Fills `bytes` at `data` (a tensor of `dtype`) with its poison: NaN for floating types, the
/// type's minimum for signed integers, byte 0xA5 for uint8 and bool. The verifier's pre-fill and
/// the workers' fill before every timed run (the code must compute every run, docs/env.md).
void poison(void* data, size_t bytes, DType dtype);

/// True when the element at `data` (one element of `dtype`) holds exactly the poison's bits: an
/// element the code never wrote, as opposed to a NaN the code computed (0/0 and inf/inf give
/// x86's default NaN, sign bit set, which is not the poison's quiet NaN).
bool is_poison(const void* data, DType dtype);

}  // namespace leap::env
