// Logging helpers: the progress line's figures.
#include <doctest/doctest.h>

#include "util/log.hpp"

using leap::util::format_progress;

TEST_CASE("log: progress line shows count, percent, rate and ETA") {
  // 25 of 100 in 10 s: 2.5 it/s, 75 left -> 30 s.
  CHECK(format_progress("rollouts", 25, 100, 10.0) == "rollouts 25/100 (25.0%) 2.50 it/s, elapsed 0:10, ETA 0:30");
  // unknown total: no percent, no ETA
  CHECK(format_progress("steps", 3, 0, 1.5) == "steps 3 2.00 it/s, elapsed 0:02");
  // done: no ETA; hours format
  CHECK(format_progress("x", 10, 10, 3725.0) == "x 10/10 (100.0%) 0.00 it/s, elapsed 1:02:05");
}
