#include "rl/grade_queue.hpp"

#include <algorithm>

namespace leap::rl {

GradeQueue::GradeQueue(std::vector<std::string> keys) : keys_(std::move(keys)) {
  waiting_.resize(keys_.size());
  for (size_t i = 0; i < waiting_.size(); ++i) waiting_[i] = i;
}

long GradeQueue::next() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (waiting_.empty()) return -1;
  auto it = std::find_if(waiting_.begin(), waiting_.end(), [&](size_t i) { return !in_flight_.count(keys_[i]); });
  if (it == waiting_.end()) it = waiting_.begin();
  const size_t i = *it;
  waiting_.erase(it);
  ++in_flight_[keys_[i]];
  return static_cast<long>(i);
}

void GradeQueue::done(size_t i) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_flight_.find(keys_.at(i));
  if (it != in_flight_.end() && --it->second <= 0) in_flight_.erase(it);
}

}  // namespace leap::rl
