#include "env/run_sample.hpp"

#include <algorithm>
#include <string>

#include "env/errors.hpp"

namespace leap::env {

RunSample::RunSample(size_t slots, uint64_t seed, std::vector<int> outputs)
    : slot_run_(std::max<size_t>(1, slots), -1), outputs_(std::move(outputs)), rng_(seed ^ 0x53414D504C45ull) {}

int RunSample::offer(int run) {
  if (run != next_) throw Error("internal: run " + std::to_string(run) + " offered to the sample; expected run " + std::to_string(next_));
  ++next_;
  const size_t k = slot_run_.size();
  size_t slot = static_cast<size_t>(run);
  if (slot >= k) {
    slot = std::uniform_int_distribution<size_t>(0, static_cast<size_t>(run))(rng_);
    if (slot >= k) return -1;
  }
  slot_run_[slot] = run;
  return static_cast<int>(slot);
}

std::vector<Snapshot> RunSample::snapshots() const { return snapshots_of_slots(slot_run_, outputs_, 0); }

std::vector<Snapshot> snapshots_of_slots(const std::vector<int>& slot_runs, const std::vector<int>& outputs, int first) {
  std::vector<Snapshot> out;
  const size_t n_out = outputs.size();
  for (size_t s = 0; s < slot_runs.size(); ++s) {
    if (slot_runs[s] < 0) continue;
    Snapshot snap;
    snap.run = slot_runs[s];
    for (size_t j = 0; j < n_out; ++j) snap.copies.emplace_back(outputs[j], first + static_cast<int>(s * n_out + j));
    out.push_back(std::move(snap));
  }
  std::sort(out.begin(), out.end(), [](const Snapshot& a, const Snapshot& b) { return a.run < b.run; });
  return out;
}

}  // namespace leap::env
