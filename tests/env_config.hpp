#pragma once
// The environment settings the env tests grade with: one worker, two seeds, a warm-up of 1 and
// 5 timed runs with no time box, the compile cache in a test's own folder.
#include "config/experiment.hpp"
#include "support.hpp"

namespace leap::test {

inline config::EnvConfig small_env(const TempDir& dir) {
  config::EnvConfig e;
  e.workers = 1;
  e.seeds = 2;
  e.cache_dir = dir.path.string();
  e.timing.warmup = 1;
  e.timing.trials = 5;
  e.timing.max_seconds = 0;
  return e;
}

}  // namespace leap::test
