#pragma once
// What this host knows about a process: whether it exists and when it started (to tell a reused
// pid apart), and the host name. Used by the run lease (store::RunLease).
#include <optional>
#include <string>

namespace leap::util {

/// Start time of process `pid` on this host in Unix seconds (the boot time plus field 22 of
/// /proc/PID/stat), or nullopt when there is no such process. The same process always gives the
/// same value; a new process that reuses the pid gives a later one.
std::optional<double> process_start_time(long pid);

/// This machine's host name ("unknown" if it cannot be read).
std::string host_name();

}  // namespace leap::util
