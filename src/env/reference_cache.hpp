#pragma once
// The reference's inputs and outputs for the correctness seeds and the timing sets, kept across
// evaluations (issue "Environment V", item 8): the answers of one GRPO group share a task and its
// seeds, so the parent generates each input set and runs the reference on it once, not once per
// answer. Timed runs' inputs change at secret positions for every job (env/input_rewrite.hpp), so
// what the reference returns for them is never kept. The reference is still timed as before.
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

namespace leap::env {

class RuntimeTask;

/// One input set of a task and, once the reference ran on it, its outputs. Shared, read-only:
/// nobody writes into these tensors (the verifier copies inputs into a job's buffers).
struct ReferenceEntry {
  std::vector<torch::Tensor> inputs;   ///< the task's inputs, declaration order
  std::vector<torch::Tensor> outputs;  ///< the reference's outputs; empty until it ran
  /// Bytes held (inputs + outputs).
  size_t bytes() const;
};

/// Counters of a ReferenceCache since it was made.
struct ReferenceCacheStats {
  int64_t input_hits = 0, input_misses = 0;    ///< input sets found / generated
  int64_t output_hits = 0, output_misses = 0;  ///< reference outputs found / computed
  size_t bytes = 0;                            ///< held now
};

/// A memory-bounded, thread-safe map from (task, input seed) to a ReferenceEntry; the least
/// recently used entries go first when a new one would pass `max_bytes`. An entry larger than
/// `max_bytes` is used once and not kept. `max_bytes` 0: nothing is kept (every call computes).
class ReferenceCache {
 public:
  explicit ReferenceCache(size_t max_bytes) : max_bytes_(max_bytes) {}

  /// The key of input seed `seed` of `task` with `threads` reference threads: the task's name,
  /// content hash, backend and concrete input shapes, so two tasks never share an entry.
  static std::string key(const RuntimeTask& task, uint64_t seed, int threads);

  /// The entry under `key`, or one made by `make_inputs()` (a vector of input tensors) and kept.
  template <class MakeInputs>
  std::shared_ptr<const ReferenceEntry> inputs(const std::string& key, MakeInputs&& make_inputs) {
    if (auto e = find(key, false)) return e;
    auto e = std::make_shared<ReferenceEntry>();
    e->inputs = make_inputs();
    return put(key, std::move(e));
  }

  /// `entry`'s reference outputs: kept ones, or `run(inputs)` computed now and kept with it.
  template <class RunReference>
  std::vector<torch::Tensor> outputs(const std::string& key, const std::shared_ptr<const ReferenceEntry>& entry,
                                     RunReference&& run) {
    if (auto e = find(key, true)) return e->outputs;
    auto filled = std::make_shared<ReferenceEntry>();
    filled->inputs = entry->inputs;
    filled->outputs = run(entry->inputs);
    put(key, filled);
    return filled->outputs;
  }

  ReferenceCacheStats stats() const;

 private:
  /// The entry under `key` (with outputs when `with_outputs`), counted as a hit, or null (a miss).
  std::shared_ptr<const ReferenceEntry> find(const std::string& key, bool with_outputs);
  /// Keeps `e` under `key` (replacing what was there), evicting the least recently used; returns `e`.
  std::shared_ptr<const ReferenceEntry> put(const std::string& key, std::shared_ptr<const ReferenceEntry> e);

  using Lru = std::list<std::string>;
  struct Slot {
    std::shared_ptr<const ReferenceEntry> entry;
    Lru::iterator lru;
  };
  size_t max_bytes_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Slot> slots_;
  Lru lru_;  ///< most recently used first
  ReferenceCacheStats stats_;
};

}  // namespace leap::env
