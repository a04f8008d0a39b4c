#include "rl/grader.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <thread>

#include "env/verifier.hpp"

namespace leap::rl {

VerifierGrader::VerifierGrader(env::Verifier& verifier, int threads) : verifier_(verifier), threads_(threads) {}

std::vector<env::EvalResult> VerifierGrader::grade(const std::vector<GradeRequest>& requests) {
  std::vector<env::EvalResult> out(requests.size());
  std::vector<std::exception_ptr> errors(requests.size());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < requests.size();) {
      try {
        out[i] = verifier_.evaluate(*requests[i].task, requests[i].answer);
      } catch (...) {
        errors[i] = std::current_exception();
      }
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
