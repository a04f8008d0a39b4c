#pragma once
// The environment as the rollout engine sees it: (task, answer) pairs in, verdicts out.
#include <string>
#include <vector>

#include "env/verdict.hpp"

namespace leap::env {
class RuntimeTask;
class Verifier;
}  // namespace leap::env

namespace leap::rl {

/// One answer to evaluate.
struct GradeRequest {
  const env::RuntimeTask* task = nullptr;
  std::string answer;  ///< the model's full completion text
};

/// Evaluates answers; implementations may run them concurrently.
class Grader {
 public:
  virtual ~Grader() = default;
  /// One result per request, in order. A fault of the answer is a verdict; a broken task or
  /// toolchain throws leap::Error.
  virtual std::vector<env::EvalResult> grade(const std::vector<GradeRequest>& requests) = 0;
};

/// A Grader over the real environment: `threads` concurrent Verifier::evaluate calls (compile in
/// parallel; workers run the code), taking the requests in order except that an identical answer
/// to the same task is not taken while another copy is graded and other requests wait
/// (rl/grade_queue.hpp). Results in request order. The verifier must outlive it.
class VerifierGrader : public Grader {
 public:
  VerifierGrader(env::Verifier& verifier, int threads);
  std::vector<env::EvalResult> grade(const std::vector<GradeRequest>& requests) override;

 private:
  env::Verifier& verifier_;
  int threads_;
};

}  // namespace leap::rl
