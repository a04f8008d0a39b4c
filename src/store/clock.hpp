#pragma once
// Wall-clock time as the store records it.
#include <chrono>

namespace leap::store {

/// Current wall-clock time in seconds since the Unix epoch (UTC), with sub-second precision.
/// Every *_at / time / wall_time column of the store uses this unit.
inline double unix_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

}  // namespace leap::store
