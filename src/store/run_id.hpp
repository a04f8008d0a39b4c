#pragma once
// Run identifiers: sortable by start time, readable, unique across machines in practice.
#include <cstdint>
#include <string>

namespace leap::store {

/// Formats a run id "YYYYMMDD-HHMMSS-xxxx": the UTC start time (`unix_seconds`, seconds since
/// the epoch) and the low 16 bits of `random` as 4 lowercase hex digits.
/// Example: make_run_id(1795966200, 0xab12) == "20261129-153000-ab12".
std::string make_run_id(double unix_seconds, std::uint32_t random);

/// make_run_id(unix_seconds, <random from std::random_device>).
std::string make_run_id(double unix_seconds);

/// True when `id` has the shape make_run_id produces.
bool is_run_id(const std::string& id);

}  // namespace leap::store
