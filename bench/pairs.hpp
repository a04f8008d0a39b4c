#pragma once
// Alternating A/B measurement for the benches: the two sides run A B A B ... and the summary is
// the median of the per-pair ratios with its min and max, so a loaded machine widens the printed
// range instead of faking a ratio.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace leap::bench {

/// Seconds since an arbitrary epoch (steady clock).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Median of `v` (the mean of the two middle values for an even count); 0 for an empty vector.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Per-pair values of an A/B run: seconds of each side and the ratio b / a of each pair.
struct Pairs {
  std::vector<double> a_s, b_s, ratio;
  /// "median R (min .. max) over N pairs" of the ratios.
  std::string summary() const {
    char buf[160];
    if (ratio.empty()) return "no pairs";
    std::snprintf(buf, sizeof buf, "median %.3f (min %.3f, max %.3f) over %zu pairs", median(ratio),
                  *std::min_element(ratio.begin(), ratio.end()), *std::max_element(ratio.begin(), ratio.end()),
                  ratio.size());
    return buf;
  }
};

/// Runs `warmup` unrecorded A B pairs, then `pairs` recorded ones, A first in each; each side
/// returns its own measured seconds (so setup outside the timed region is not counted).
inline Pairs alternate(const std::function<double()>& a, const std::function<double()>& b, int pairs, int warmup = 1) {
  for (int i = 0; i < warmup; ++i) {
    a();
    b();
  }
  Pairs p;
  for (int i = 0; i < pairs; ++i) {
    const double ta = a(), tb = b();
    p.a_s.push_back(ta);
    p.b_s.push_back(tb);
    p.ratio.push_back(tb / ta);
  }
  return p;
}

}  // namespace leap::bench
