#pragma once
// Content hashing for cache keys and config identity (not cryptographic).
#include <cstdint>
#include <string>
#include <string_view>

namespace leap::util {

/// 64-bit FNV-1a of `data`, continuing from `seed` (so parts can be chained).
uint64_t fnv1a64(std::string_view data, uint64_t seed = 0xcbf29ce484222325ULL);

/// `fnv1a64(data)` as 16 lowercase hex digits.
std::string hash_hex(std::string_view data);

}  // namespace leap::util
