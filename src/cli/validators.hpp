#pragma once
// CLI11 validators for numeric options, so a bad value is a usage error (exit 2) that names the
// option instead of a LibTorch failure later.
#include <CLI/CLI.hpp>

#include <cmath>
#include <string>

namespace leap::cli {

/// Accepts a finite number in [lo, hi] (NaN and infinities are refused, unlike CLI::Range).
inline CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& s) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(s, &used);
          if (used != s.size()) return "'" + s + "' is not a number";
        } catch (const std::exception&) {
          return "'" + s + "' is not a number";
        }
        if (!std::isfinite(v) || v < lo || v > hi)
          return "'" + s + "' is not a finite number in [" + CLI::detail::to_string(lo) + ", " +
                 CLI::detail::to_string(hi) + "]";
        return {};
      },
      "FINITE in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

}  // namespace leap::cli
