#pragma once
// A uniform sample of the runs a timing job makes, drawn by the parent while the job runs
// (issue "Environment V", docs/env.md "Timing"). A schedule with `warmup_ms` or `min_timed_ms`
// makes as many runs as its wall-time goals take, which neither side knows in advance: a list of
// checked runs drawn before the job from the runs it was sure to make left every later run
// unchecked (a red team skipped them: 3.8x and 6.9x against an honest 0.18x on tanh). Here the
// parent decides about run t only once run t is done (the worker reports every run and waits for
// the parent), so every run made is checked with the same probability and code in the worker
// cannot know which.
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "env/backend.hpp"

namespace leap::env {

/// Reservoir sampling (Vitter 1985, algorithm R) of a job's runs into `slots` output copies.
/// Parent side only (RunRequest::sample; never sent to a worker).
class RunSample {
 public:
  /// `slots` runs kept at most (>= 1); `seed` a secret of the job; `outputs` the output positions
  /// (in a rotation) copied for a kept run, in order.
  RunSample(size_t slots, uint64_t seed, std::vector<int> outputs);

  /// Offers run `run`, which must be the next run of the job (0, 1, 2, ...). Returns the slot
  /// its outputs replace, or -1 when it is not kept. The first `slots` runs are all kept; run t
  /// beyond them replaces a uniformly drawn slot with probability slots / (t + 1).
  /// Throws leap::Error on a run out of order.
  int offer(int run);

  /// Copies of a kept run's output j go to store index `slot * outputs().size() + j`.
  const std::vector<int>& outputs() const { return outputs_; }
  size_t slots() const { return slot_run_.size(); }

  /// The kept runs as snapshots, sorted by run: Snapshot::copies holds (output position, store
  /// index) pairs, as RunRequest::snapshot_store expects.
  std::vector<Snapshot> snapshots() const;

  /// The run each slot holds, -1 for a slot not filled yet.
  const std::vector<int>& slot_runs() const { return slot_run_; }

 private:
  std::vector<int> slot_run_;  ///< the run each slot holds, -1: none yet
  std::vector<int> outputs_;
  std::mt19937_64 rng_;
  int next_ = 0;  ///< the run offer() expects next
};

/// Snapshots of the runs `slot_runs` names (slot s holds run slot_runs[s], -1: none), sorted by
/// run: output j of slot s is copy (outputs[j], first + s * outputs.size() + j).
std::vector<Snapshot> snapshots_of_slots(const std::vector<int>& slot_runs, const std::vector<int>& outputs, int first);

}  // namespace leap::env
