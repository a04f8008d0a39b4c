// Who holds a run's lease, and whether that holder is gone (docs/training.md "Resume").
#pragma once

#include <optional>
#include <string>

#include "store/records.hpp"

namespace leap::store {

/// A lease from another host not refreshed for this long (seconds) is stale.
inline constexpr double kLeaseStaleSeconds = 2 * 3600.0;

/// This process as a run's lease holder: host name, pid and the process's start time.
RunLease my_lease();

/// Why the lease `l` is stale (its holder is gone), or nullopt while the holder may still write.
/// On this host: the pid does not run, or runs a process started at another time (a reused pid).
/// From another host: not refreshed for kLeaseStaleSeconds. Reads /proc; throws nothing.
std::optional<std::string> lease_stale_reason(const RunLease& l);

}  // namespace leap::store
