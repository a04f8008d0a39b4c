#pragma once
// The median of a list of numbers (timings, ratios). Header-only, std only.
#include <algorithm>
#include <limits>
#include <vector>

namespace leap::util {

/// The median of `v` (the mean of the two middle values for an even count); NaN when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace leap::util
