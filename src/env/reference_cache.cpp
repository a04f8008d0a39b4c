// ReferenceCache (env/reference_cache.hpp): least-recently-used, bounded by bytes.
#include "env/reference_cache.hpp"

#include "env/task_runtime.hpp"

namespace leap::env {

size_t ReferenceEntry::bytes() const {
  size_t n = 0;
  for (const auto& t : inputs) n += static_cast<size_t>(t.nbytes());
  for (const auto& t : outputs) n += static_cast<size_t>(t.nbytes());
  return n;
}

std::string ReferenceCache::key(const RuntimeTask& task, uint64_t seed, int threads) {
  std::string k = task.spec().name + "\n" + task.spec().hash + "\n" + task.backend() + "\n" + std::to_string(seed) +
                  "\n" + std::to_string(threads) + "\n";
  for (const auto& shape : task.input_shapes()) {
    for (int64_t d : shape) k += std::to_string(d) + ",";
    k += ";";
  }
  return k;
}

std::shared_ptr<const ReferenceEntry> ReferenceCache::find(const std::string& key, bool with_outputs) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = slots_.find(key);
  const bool hit = it != slots_.end() && (!with_outputs || !it->second.entry->outputs.empty());
  (with_outputs ? (hit ? stats_.output_hits : stats_.output_misses) : (hit ? stats_.input_hits : stats_.input_misses))++;
  if (!hit) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.entry;
}

std::shared_ptr<const ReferenceEntry> ReferenceCache::put(const std::string& key,
                                                          std::shared_ptr<const ReferenceEntry> e) {
  const size_t need = e->bytes();
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = slots_.find(key); it != slots_.end()) {
    // Another evaluation filled in the outputs meanwhile: keep those, not inputs alone.
    if (!it->second.entry->outputs.empty() && e->outputs.empty()) {
      lru_.splice(lru_.begin(), lru_, it->second.lru);
      return it->second.entry;
    }
    stats_.bytes -= it->second.entry->bytes();
    lru_.erase(it->second.lru);
    slots_.erase(it);
  }
  if (need > max_bytes_) return e;  // used once, not kept
  while (stats_.bytes + need > max_bytes_ && !lru_.empty()) {
    auto victim = slots_.find(lru_.back());
    stats_.bytes -= victim->second.entry->bytes();
    slots_.erase(victim);
    lru_.pop_back();
  }
  lru_.push_front(key);
  slots_[key] = Slot{e, lru_.begin()};
  stats_.bytes += need;
  return e;
}

ReferenceCacheStats ReferenceCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace leap::env
