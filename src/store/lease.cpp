#include "store/lease.hpp"

#include <unistd.h>

#include <cmath>
#include <fmt/format.h>

#include "store/clock.hpp"
#include "util/process_info.hpp"

namespace leap::store {

RunLease my_lease() {
  RunLease l;
  l.host = util::host_name();
  l.pid = static_cast<int64_t>(getpid());
  l.process_started_at = util::process_start_time(getpid()).value_or(0);
  return l;
}

std::optional<std::string> lease_stale_reason(const RunLease& l) {
  if (l.host == util::host_name()) {
    const auto started = util::process_start_time(static_cast<long>(l.pid));
    if (!started) return fmt::format("pid {} is not running on this host", l.pid);
    if (std::abs(*started - l.process_started_at) > 1.0)
      return fmt::format("pid {} is now another process (it started {:.0f} s after the lease's holder)", l.pid,
                         *started - l.process_started_at);
    return std::nullopt;
  }
  const double age = unix_now() - l.refreshed_at;
  if (age > kLeaseStaleSeconds)
    return fmt::format("the lease of host {} was last refreshed {:.0f} s ago (stale after {:.0f} s)", l.host, age,
                       kLeaseStaleSeconds);
  return std::nullopt;
}

}  // namespace leap::store
