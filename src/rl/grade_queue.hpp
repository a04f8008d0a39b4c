#pragma once
// The order in which a Grader's threads take its requests (rl/grader.hpp). Identical answers to
// one task (a GRPO group's repeated samples) are not graded at the same time while other work is
// waiting: the environment runs one CPU-time check per code and compiles it once, so a second
// copy graded beside the first only waits for it, holding a grading thread idle; taken after it,
// the copy reads what the first left (issue "Environment V", bench/env_cpu).
#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace leap::rl {

/// A thread-safe queue of request indices 0..n-1 (keys[i]: what makes two requests the same,
/// such as task and answer text). next() hands out the first waiting request whose key no
/// request in flight has; when every waiting request's key is in flight, the first waiting one.
class GradeQueue {
 public:
  explicit GradeQueue(std::vector<std::string> keys);
  /// The next request to grade (now in flight), or -1 when none is left.
  long next();
  /// Request `i` (handed out by next()) is done.
  void done(size_t i);

 private:
  std::mutex mutex_;
  std::vector<std::string> keys_;
  std::vector<size_t> waiting_;                          ///< in request order
  std::unordered_map<std::string, int> in_flight_;       ///< key -> requests in flight
};

}  // namespace leap::rl
