#include "rl/grader.hpp"

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>

#include "env/verifier.hpp"
#include "rl/grade_queue.hpp"

namespace leap::rl {

VerifierGrader::VerifierGrader(env::Verifier& verifier, int threads) : verifier_(verifier), threads_(threads) {}

std::vector<env::EvalResult> VerifierGrader::grade(const std::vector<GradeRequest>& requests) {
  std::vector<env::EvalResult> out(requests.size());
  std::vector<std::exception_ptr> errors(requests.size());
  // Identical answers to one task are taken apart in time (rl/grade_queue.hpp).
  std::vector<std::string> keys;
  keys.reserve(requests.size());
  for (const auto& r : requests)
    keys.push_back(std::to_string(reinterpret_cast<uintptr_t>(r.task)) + '\0' + r.answer);
  GradeQueue queue(std::move(keys));
  auto work = [&] {
    for (long k; (k = queue.next()) >= 0;) {
      const size_t i = static_cast<size_t>(k);
      try {
        out[i] = verifier_.evaluate(*requests[i].task, requests[i].answer);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      queue.done(i);
    }
  };
  std::vector<std::thread> pool;
  const size_t n = std::min<size_t>(static_cast<size_t>(std::max(1, threads_)), std::max<size_t>(1, requests.size()));
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

}  // namespace leap::rl
