// The trainer's periodic evaluation (rl::summarize_eval) on hand-worked rollouts, and the same
// figures `leap report` computes from the evaluation's stored rows (issue "Architecture II": one
// metrics definition; before, training took fast_p from the final correct answer, the turn-1
// compile rate and the first correct speedup, `leap report` the best speedup and all attempts).
#include <doctest/doctest.h>

#include <cmath>

#include "env/task_runtime.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR
#include "report/store_input.hpp"
#include "rl/evaluate.hpp"
#include "rl/step_record.hpp"
#include "store/store.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"

using namespace leap;

namespace {

const std::string kRelu = std::string(LEAP_SOURCE_DIR) + "/tasks/starter/relu";
const std::string kTanh = std::string(LEAP_SOURCE_DIR) + "/tasks/starter/tanh";

rl::TurnResult attempt(int turn, env::Verdict v, double speedup = std::nan("")) {
  rl::TurnResult t;
  t.turn = turn;
  t.parent = turn - 2;  // a chain: turn t continues turn t - 1 (index t - 2)
  t.result.verdict = v;
  t.result.speedup = speedup;
  t.sample.completion_ids.assign(static_cast<size_t>(10 * turn), 1);
  return t;
}

}  // namespace

TEST_CASE("rl evaluate: summarize_eval is metrics::compute_metrics, and leap report reads the same figures back") {
  env::RuntimeTask relu(tasks::load_task(kRelu), "cpu");
  env::RuntimeTask tanh_task(tasks::load_task(kTanh), "cpu");
  const std::vector<const env::RuntimeTask*> tasks = {&relu, &tanh_task};
  using V = env::Verdict;
  // relu: sample 0 passes at 2.0x, then refines to a slower 0.5x; sample 1 fails to compile,
  // then passes at 1.5x. tanh: sample 0 fails twice; sample 1 is void (an infra_error).
  std::vector<rl::GroupResult> groups(2);
  groups[0].task_index = 0;
  groups[0].rollouts.resize(2);
  groups[0].rollouts[0].turns = {attempt(1, V::correct, 2.0), attempt(2, V::correct, 0.5)};
  groups[0].rollouts[1].turns = {attempt(1, V::compile_error), attempt(2, V::correct, 1.5)};
  groups[1].task_index = 1;
  groups[1].rollouts.resize(2);
  groups[1].rollouts[0].turns = {attempt(1, V::wrong_output), attempt(2, V::wrong_output)};
  groups[1].rollouts[1].turns = {attempt(1, V::format_error), attempt(2, V::infra_error)};

  const rl::EvalSummary s = rl::summarize_eval(groups, tasks, 2, {0.0, 1.0});
  CHECK(s.tasks == 2);
  CHECK(s.samples == 2);
  // Acc@t: mean over tasks of the share of (non-void) samples correct by turn t.
  REQUIRE(s.acc_at.size() == 2);
  CHECK(s.acc_at[0] == doctest::Approx((0.5 + 0.0) / 2));
  CHECK(s.acc_at[1] == doctest::Approx((1.0 + 0.0) / 2));
  // fast_1 from each sample's best speedup (2.0 and 1.5 for relu): 1 for relu, 0 for tanh. The
  // final-answer definition gave relu 0.5 (sample 0 ended at 0.5x).
  CHECK(s.fast_p.at(1.0) == doctest::Approx(0.5));
  CHECK(s.fast_p.at(0.0) == doctest::Approx(0.5));
  // Compile rate over every non-void attempt: 3 of relu's 4, both of tanh's sample 0.
  CHECK(s.compile_rate == doctest::Approx(5.0 / 6.0));
  CHECK(s.geomean_speedup == doctest::Approx(std::sqrt(2.0 * 1.5)));
  CHECK(s.pass_at_k == doctest::Approx(0.5));  // pass@2: relu 1; tanh (one non-void sample, wrong) its pass@1, 0
  const auto logged = rl::eval_metrics(s);
  CHECK(logged.at("eval/fast_1") == doctest::Approx(0.5));
  CHECK(logged.at("eval/acc@2") == doctest::Approx(0.5));

  // The same evaluation written as the trainer writes it, then scored as `leap report` does.
  test::TempDir dir;
  store::Store st((dir.path / "leap.db").string());
  store::RunInfo ri;
  ri.name = "eval-consistency";
  const std::string run = st.create_run(ri);
  const int64_t ev = st.write_evaluation({run, 0, "starter/eval", "{}", std::nullopt},
                                         rl::eval_result_records(groups, tasks, "starter"));
  const metrics::MetricsInput in = report::eval_input(st.db(), ev);
  const metrics::Metrics m = metrics::compute_metrics(in).overall;
  CHECK(m.acc == s.acc_at);
  CHECK(m.fast_p.at(1.0) == doctest::Approx(logged.at("eval/fast_1")));
  CHECK(m.compile_rate == doctest::Approx(logged.at("eval/compile_rate")));
  CHECK(m.geomean_speedup == doctest::Approx(logged.at("eval/geomean_speedup")));
  CHECK(m.pass_at_k.at(2) == doctest::Approx(logged.at("eval/pass@k")));
}
