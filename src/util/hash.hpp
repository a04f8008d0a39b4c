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

/// Mixes two 64-bit values into a well-spread seed (a boost-style combine followed by the
/// MurmurHash3 finaliser): used to derive per-step, per-turn and per-purpose sampling seeds.
uint64_t mix_seed(uint64_t a, uint64_t b) noexcept;

}  // namespace leap::util
