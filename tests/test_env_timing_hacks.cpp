// Answers written to game the timing (cpu backend), and the cap on suspicious speedups (scoring).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "cli/environment.hpp"
#include "env/task_runtime.hpp"
#include "rl/scoring.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using namespace leap;

TEST_SUITE_BEGIN("env");

namespace {

const std::string kStarter = LEAP_SOURCE_DIR "/tasks/starter";

env::EvalResult grade_relu(const std::string& body) {
  test::TempDir dir;
  config::EnvConfig e;
  e.workers = 1;
  e.seeds = 2;
  e.cache_dir = dir.path.string();
  e.timing.warmup = 1;
  e.timing.trials = 5;
  e.timing.max_seconds = 0.5;
  auto env = cli::make_environment(e, "cpu");
  env::RuntimeTask task(tasks::load_task(kStarter + "/relu"), "cpu");
  const std::string answer = "```cpp\n#include <cstdint>\n#include <cmath>\nextern \"C\" void relu(const float* x, float* y, int64_t n) {\n" +
                             body + "\n}\n```\n```yaml\nlaunches:\n  - kernel: relu\n    args: [x, y, numel(x)]\n```\n";
  return env->verifier->evaluate(task, answer);
}

const char* kCompute = "  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0;";

}  // namespace

TEST_CASE("env timing: an honest answer is correct; skipping work in later calls is wrong_output") {
  auto honest = grade_relu(kCompute);
  CAPTURE(honest.feedback);
  CHECK(honest.verdict == env::Verdict::correct);

  // Returns at once when its output already holds numbers (as its first call left it): every
  // run starts from poisoned outputs, so it must compute every time, and earns no speedup from
  // skipping (it is an honest answer now: correct, never suspicious).
  auto skip = grade_relu(std::string("  if (!std::isnan(y[0]) && !std::isnan(y[n - 1])) return;\n") + kCompute);
  CAPTURE(skip.feedback);
  CHECK(skip.verdict == env::Verdict::correct);
  CHECK_FALSE(skip.suspicious);
  // Returns at once when its output is not all zeros (it assumes zeroed outputs): the poison stays.
  auto zeros = grade_relu(std::string("  static bool done = false; if (done && y[0] != 0.0f) return; done = true;\n") + kCompute);
  CAPTURE(zeros.feedback);
  CHECK(zeros.verdict == env::Verdict::wrong_output);
  CHECK(zeros.feedback.find("after the timing loop") != std::string::npos);

  // Computes only on its first call of the process (the timing job's first run).
  auto once = grade_relu(std::string("  static int calls = 0; if (calls++ > 0) return;\n") + kCompute);
  CAPTURE(once.feedback);
  CHECK(once.verdict == env::Verdict::wrong_output);
}

TEST_CASE("scoring: a suspicious speedup earns exactly what the cap gives, under every reward kind") {
  // Two rollouts: one correct with a suspicious 3000x, one correct at 2x; against the same group
  // where the first is an honest result at exactly the cap (10x), every reward must match.
  auto group_with = [](double first_speedup, bool suspicious) {
    rl::GroupResult g;
    for (double sp : {first_speedup, 2.0}) {
      rl::RolloutResult r;
      rl::TurnResult t;
      t.result = env::EvalResult::make(env::Verdict::correct, "");
      t.result.speedup = sp;
      t.result.suspicious = suspicious && sp == first_speedup;
      r.turns.push_back(t);
      g.rollouts.push_back(r);
    }
    return g;
  };
  config::Experiment exp;
  exp.env.timing.suspicious_speedup = 10.0;
  const auto hacked = group_with(3000.0, true);
  const auto capped = group_with(10.0, false);
  for (const char* kind : {"speedup", "kernelgym", "rank", "binary"}) {
    CAPTURE(kind);
    exp.reward.kind = kind;
    exp.reward.rank_keys = {"speedup"};
    const auto a = rl::score_group(hacked, exp);
    const auto b = rl::score_group(capped, exp);
    REQUIRE(a.size() == 2);
    for (size_t i = 0; i < 2; ++i) {
      CHECK(a[i].reward == doctest::Approx(b[i].reward));
      CHECK(a[i].reward_speedup == doctest::Approx(b[i].reward_speedup));
      CHECK(a[i].reward_kernelgym == doctest::Approx(b[i].reward_kernelgym));
      CHECK(a[i].reward_rank == doctest::Approx(b[i].reward_rank));
    }
  }
  // And the cap matters: without the flag, 3000x is worth more than 10x.
  exp.reward.kind = "speedup";
  CHECK(rl::score_group(group_with(3000.0, false), exp)[0].reward_speedup > rl::score_group(capped, exp)[0].reward_speedup);
}
