// rl/sft: the warm start's examples (build_sft_pool): shipped solutions, wrong twins as turn-1
// targets, and second-turn examples whose context is the turn-1 prompt, a wrong twin and the
// environment's feedback on it, with the correct solution as the target.
#include <doctest/doctest.h>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <random>
#include <set>

#include "config/experiment.hpp"
#include "env/task_runtime.hpp"
#include "model/chat_format.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "rl/grader.hpp"
#include "rl/local_policy.hpp"
#include "rl/mutants.hpp"
#include "rl/prompts.hpp"
#include "rl/sft.hpp"
#include "support.hpp"
#include "util/error.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using namespace leap;

TEST_SUITE_BEGIN("rl");

namespace {

const std::string kStarter = std::string(LEAP_SOURCE_DIR) + "/tasks/starter";

/// A call of only shipped solutions (build_sft_pool grades them first) gets `shipped_verdict`
/// for each and is recorded in `shipped_calls`. Every other answer gets `verdict` with the
/// feedback "fb <n>" (n: the answer's index over those calls), and is recorded, call by call.
struct FixedGrader : rl::Grader {
  env::Verdict verdict = env::Verdict::wrong_output;
  env::Verdict shipped_verdict = env::Verdict::correct;
  std::set<std::string> shipped;  ///< the shipped solutions' texts (Setup::pool fills it)
  std::vector<std::vector<std::string>> calls, shipped_calls;
  int64_t n = 0;
  std::vector<env::EvalResult> grade(const std::vector<rl::GradeRequest>& requests) override {
    std::vector<env::EvalResult> out;
    const bool all_shipped = std::all_of(requests.begin(), requests.end(),
                                         [&](const rl::GradeRequest& r) { return shipped.count(r.answer) > 0; });
    if (all_shipped && !requests.empty()) {
      shipped_calls.emplace_back();
      for (const auto& r : requests) {
        shipped_calls.back().push_back(r.answer);
        out.push_back(env::EvalResult::make(shipped_verdict, "shipped fb\nsecond line"));
      }
      return out;
    }
    calls.emplace_back();
    for (const auto& r : requests) {
      calls.back().push_back(r.answer);
      out.push_back(env::EvalResult::make(verdict, "fb " + std::to_string(n++)));
    }
    return out;
  }
  size_t requests() const {
    size_t k = 0;
    for (const auto& c : calls) k += c.size();
    return k;
  }
};

/// The tiny model, its policy and the starter set's relu and gelu_tanh tasks, for SftContext.
struct Setup {
  model::Tokenizer tok;
  model::Transformer model;
  std::unique_ptr<rl::LocalPolicy> policy;
  std::vector<at::Tensor> params;
  std::vector<std::unique_ptr<env::RuntimeTask>> owned;
  std::vector<const env::RuntimeTask*> tasks;
  config::Experiment exp;
  Setup()
      : tok(model::Tokenizer::from_file(test::tiny_model() / "tiny")),
        model(model::load_transformer(test::tiny_model() / "tiny")) {
    const auto fmt = model::resolve_chat_format(model::ChatFormat::Auto, model->config().model_type_name, tok);
    policy = std::make_unique<rl::LocalPolicy>(model, tok, fmt);
    for (auto& p : model->parameters()) params.push_back(p);
    for (const char* name : {"relu", "gelu_tanh"}) {
      owned.push_back(std::make_unique<env::RuntimeTask>(tasks::load_task(kStarter + "/" + name), "cpu"));
      tasks.push_back(owned.back().get());
    }
    exp.env.backend = "cpu";
    exp.train.sft.enabled = true;
  }
  rl::SftPool pool(FixedGrader& grader) {
    for (const auto* t : tasks)
      for (const auto& text : rl::shipped_solutions(t->spec(), "cpu")) grader.shipped.insert(text);
    rl::SftContext c{exp, model, params, *policy, grader, tasks, rl::UpdateOptions{}, 0, 1, nullptr, "", true, nullptr};
    c.progress = false;
    return rl::build_sft_pool(c);
  }
  std::string solution(size_t task) { return rl::shipped_solutions(tasks[task]->spec(), "cpu").at(0); }
};

std::string decode(const model::Tokenizer& tok, const std::vector<int64_t>& ids) {
  const std::vector<model::TokenId> narrow(ids.begin(), ids.end());
  return tok.decode(narrow);
}

}  // namespace

TEST_CASE("sft pool: second-turn examples hold the twin and the environment's feedback, the solution is the target") {
  Setup s;
  REQUIRE(rl::shipped_solutions(s.tasks[0]->spec(), "cpu").size() == 1);
  REQUIRE(rl::shipped_solutions(s.tasks[1]->spec(), "cpu").size() == 1);
  s.exp.train.sft.mutants = 1;
  s.exp.train.sft.second_turn = 1;
  FixedGrader grader;
  const auto pool = s.pool(grader);
  CHECK(pool.solutions == 2);
  CHECK(pool.wrong_twins == 2);
  CHECK(pool.second_turn == 2);
  REQUIRE(pool.samples.size() == 6);
  // Every mutant is wrong: one round, the first candidate of each solution.
  REQUIRE(grader.calls.size() == 1);
  CHECK(grader.calls[0].size() == 2);
  CHECK(pool.graded == 2);

  // relu has exactly one mutant: its comparison flipped (written here by hand).
  const std::string relu = s.solution(0);
  const size_t code = relu.find("```cpp\n");
  const size_t gt = relu.find(" > ", code);
  REQUIRE(gt != std::string::npos);
  std::string relu_twin = relu;
  relu_twin.replace(gt, 3, " < ");
  CHECK(grader.calls[0][0] == relu_twin);

  // Order: the solutions, then per solution its turn-1 twin and its second-turn example.
  const auto turn1 = s.policy->encode_prompt(rl::first_turn_messages(s.tasks[0]->spec(), "cpu"));
  CHECK(pool.samples[0].prompt_ids == turn1);
  CHECK(pool.samples[0].completion_ids == s.policy->encode_completion(relu));
  CHECK(pool.samples[2].prompt_ids == turn1);
  CHECK(pool.samples[2].completion_ids == s.policy->encode_completion(relu_twin));
  // The second-turn context, built by hand: turn 1, the twin, the feedback message.
  rl::Prompt expect = rl::first_turn_messages(s.tasks[0]->spec(), "cpu");
  expect.push_back({"assistant", relu_twin});
  expect.push_back({"user", "Result: wrong_output\nfb 0\nFix the problem and answer again in the same format."});
  CHECK(pool.samples[3].prompt_ids == s.policy->encode_prompt(expect));
  CHECK(pool.samples[3].completion_ids == s.policy->encode_completion(relu));
  const std::string text = decode(s.tok, pool.samples[3].prompt_ids);
  CHECK(text.find(relu_twin) != std::string::npos);
  CHECK(text.find("Result: wrong_output\nfb 0\n") != std::string::npos);
  // gelu_tanh's second-turn example answers its own twin with its own solution.
  CHECK(decode(s.tok, pool.samples[5].prompt_ids).find(grader.calls[0][1]) != std::string::npos);
  CHECK(decode(s.tok, pool.samples[5].prompt_ids).find("fb 1") != std::string::npos);
  CHECK(pool.samples[5].completion_ids == s.policy->encode_completion(s.solution(1)));
  CHECK(pool.twins.find("relu: line 6: '>' -> '<' (wrong_output)") != std::string::npos);
}

TEST_CASE("sft pool: the shipped solutions are graded first, one the environment shows wrong is left out") {
  Setup s;
  s.exp.train.sft.second_turn = 1;
  FixedGrader ok;
  const auto pool = s.pool(ok);
  REQUIRE(ok.shipped_calls.size() == 1);  // one call grades both solutions
  CHECK(ok.shipped_calls[0] == std::vector<std::string>{s.solution(0), s.solution(1)});
  CHECK(pool.solutions == 2);
  CHECK(pool.left_out == 0);

  for (const auto v : {env::Verdict::wrong_output, env::Verdict::compile_error, env::Verdict::runtime_error,
                       env::Verdict::launch_error, env::Verdict::format_error}) {
    CAPTURE(env::to_string(v));
    FixedGrader wrong;
    wrong.shipped_verdict = v;
    const auto none = s.pool(wrong);
    CHECK(none.left_out == 2);
    CHECK(none.solutions == 0);
    CHECK(none.samples.empty());
    CHECK(wrong.calls.empty());  // no twins of a wrong solution are graded
  }
  // A timeout or an infra_error may be the machine's: the solution is kept.
  for (const auto v : {env::Verdict::timeout, env::Verdict::infra_error}) {
    FixedGrader slow;
    slow.shipped_verdict = v;
    const auto kept = s.pool(slow);
    CHECK(kept.left_out == 0);
    CHECK(kept.solutions == 2);
  }
}

TEST_CASE("sft pool: second_turn alone adds no wrong turn-1 target, grading rounds stop at enough twins") {
  Setup s;
  s.exp.train.sft.second_turn = 2;
  FixedGrader grader;
  const auto pool = s.pool(grader);
  const size_t gelu_mutants = rl::solution_mutants(s.solution(1)).size();
  REQUIRE(gelu_mutants >= 2);
  CHECK(pool.wrong_twins == 0);
  CHECK(pool.second_turn == 3);  // relu has one mutant, gelu_tanh two of its many
  CHECK(pool.samples.size() == 5);
  // Round 1 grades both solutions' first candidates, round 2 only gelu_tanh's second.
  REQUIRE(grader.calls.size() == 2);
  CHECK(grader.calls[0].size() == 2);
  CHECK(grader.calls[1].size() == 1);
  CHECK(pool.graded == 3);
  for (size_t i = 2; i < pool.samples.size(); ++i) {  // every extra sample is a second-turn example
    const std::string ctx = decode(s.tok, pool.samples[i].prompt_ids);
    CHECK(ctx.find("Result: wrong_output\nfb ") != std::string::npos);
  }
}

TEST_CASE("sft pool: without wrong_output twins all 8 candidates are graded and an error twin is taken, none when all correct") {
  Setup s;
  s.exp.train.sft.second_turn = 1;
  const size_t tried = std::min<size_t>(8, rl::solution_mutants(s.solution(0)).size()) +
                       std::min<size_t>(8, rl::solution_mutants(s.solution(1)).size());
  FixedGrader errors;
  errors.verdict = env::Verdict::compile_error;
  const auto pool = s.pool(errors);
  CHECK(pool.graded == tried);
  CHECK(errors.requests() == tried);
  CHECK(pool.second_turn == 2);
  CHECK(decode(s.tok, pool.samples[2].prompt_ids).find("Result: compile_error\nfb 0\n") != std::string::npos);

  FixedGrader correct;
  correct.verdict = env::Verdict::correct;
  const auto none = s.pool(correct);
  CHECK(none.graded == tried);
  CHECK(none.second_turn == 0);
  CHECK(none.samples.size() == 2);

  FixedGrader timeouts;
  timeouts.verdict = env::Verdict::timeout;  // never a twin
  CHECK(s.pool(timeouts).samples.size() == 2);

  s.exp.train.sft.second_turn = 0;  // no twin wanted: nothing is graded
  FixedGrader unused;
  CHECK(s.pool(unused).samples.size() == 2);
  CHECK(unused.calls.empty());
}

TEST_CASE("sft pool: twin_solutions caps the solutions that get twins to a seeded sample") {
  Setup s;
  s.exp.train.sft.second_turn = 1;
  s.exp.train.sft.twin_solutions = 1;
  const std::string relu = s.solution(0), gelu = s.solution(1);
  std::set<std::string> chosen;  // which solution got the twin, over seeds
  for (int64_t seed = 0; seed < 8; ++seed) {
    s.exp.train.seed = seed;
    FixedGrader grader;
    const auto pool = s.pool(grader);
    CHECK(pool.solutions == 2);
    CHECK(pool.second_turn == 1);
    CHECK(pool.graded == 1);
    REQUIRE(grader.calls.size() == 1);
    REQUIRE(grader.calls[0].size() == 1);
    REQUIRE(pool.samples.size() == 3);
    // The one second-turn example answers with the solution its twin was made from.
    const auto& target = pool.samples[2].completion_ids;
    const bool is_relu = target == s.policy->encode_completion(relu);
    CHECK((is_relu || target == s.policy->encode_completion(gelu)));
    chosen.insert(is_relu ? "relu" : "gelu_tanh");
    FixedGrader again;  // the same seed picks the same solution
    CHECK(s.pool(again).samples[2].completion_ids == target);
  }
  CHECK(chosen.size() == 2);  // the sample depends on the seed
  s.exp.train.sft.twin_solutions = 5;  // a cap above the count changes nothing
  FixedGrader all;
  CHECK(s.pool(all).second_turn == 2);
}

TEST_CASE("sft pool: mutant_kinds keeps only mutants of the listed kinds as twins") {
  Setup s;
  s.exp.train.sft.mutants = 1;
  // relu's one mutant is a comparison; gelu_tanh has arithmetic, function and literal ones.
  for (const std::vector<std::string>& kinds : std::vector<std::vector<std::string>>{
           {"comparison"}, {"function"}, {"literal", "arithmetic"}, {"compound"}}) {
    CAPTURE(kinds.front());
    s.exp.train.sft.mutant_kinds = kinds;
    std::set<std::string> allowed;  // every mutant text of a listed kind, by the mutants' own kinds
    size_t with_kind = 0;           // solutions with at least one such mutant
    for (size_t t = 0; t < 2; ++t) {
      bool any = false;
      for (const auto& m : rl::solution_mutants(s.solution(t)))
        if (std::find(kinds.begin(), kinds.end(), m.kind) != kinds.end()) {
          allowed.insert(m.text);
          any = true;
        }
      with_kind += any ? 1 : 0;
    }
    FixedGrader grader;
    const auto pool = s.pool(grader);
    CHECK(pool.wrong_twins == with_kind);  // every mutant is wrong here: one twin per solution that has the kind
    CHECK(pool.graded == with_kind);
    for (const auto& call : grader.calls)
      for (const auto& answer : call) CHECK(allowed.count(answer) == 1);
    std::set<std::vector<int64_t>> allowed_ids;
    for (const auto& text : allowed) allowed_ids.insert(s.policy->encode_completion(text));
    for (size_t i = pool.solutions; i < pool.samples.size(); ++i)  // the turn-1 twins' targets
      CHECK(allowed_ids.count(pool.samples[i].completion_ids) == 1);
  }
  // The kinds above are not vacuous: relu's twin is a comparison, gelu_tanh has no comparison.
  s.exp.train.sft.mutant_kinds = {"comparison"};
  FixedGrader one;
  CHECK(s.pool(one).wrong_twins == 1);
  REQUIRE(one.calls.size() == 1);
  CHECK(one.calls[0].size() == 1);
  s.exp.train.sft.mutant_kinds = {"compound"};  // neither solution has a compound assignment
  FixedGrader none;
  CHECK(s.pool(none).wrong_twins == 0);
  CHECK(none.calls.empty());
}

TEST_CASE("sft pool: teacher_error gives each solution with a site its systematic twin, drawn with that probability") {
  Setup s;
  const std::string relu = s.solution(0), gelu = s.solution(1);
  s.exp.train.sft.mutant_kinds = {"function"};  // gelu_tanh has a tanh; relu has no function call
  REQUIRE(rl::systematic_twin(relu, {"function"}) == relu);
  const std::string gelu_twin = rl::systematic_twin(gelu, {"function"});
  REQUIRE(gelu_twin != gelu);
  REQUIRE(gelu_twin.find("sinh") != std::string::npos);
  s.exp.train.sft.teacher_error = 0.7;
  FixedGrader grader;
  auto pool = s.pool(grader);
  CHECK(grader.calls.empty());  // the teacher's twins are not graded
  CHECK(pool.teacher_errors() == 1);
  REQUIRE(pool.samples.size() == 2);  // drawn instead of the solution, not added
  REQUIRE(pool.teacher_twins.size() == 2);
  CHECK(pool.teacher_twins[0].empty());
  const auto gelu_ids = s.policy->encode_completion(gelu), twin_ids = s.policy->encode_completion(gelu_twin);
  CHECK(pool.samples[1].completion_ids == gelu_ids);
  CHECK(pool.teacher_twins[1] == twin_ids);

  // Over 4000 draws the twin comes with probability 0.7 (4 standard errors: 0.029); relu never changes.
  std::mt19937_64 rng(5);
  int twins = 0;
  const int n = 4000;
  for (int k = 0; k < n; ++k) {
    const auto r = rl::teacher_sample(pool, 0, 0.7, rng);
    CHECK(r.completion_ids == s.policy->encode_completion(relu));
    const auto g = rl::teacher_sample(pool, 1, 0.7, rng);
    CHECK(g.prompt_ids == pool.samples[1].prompt_ids);
    const bool twin = g.completion_ids == twin_ids;
    CHECK((twin || g.completion_ids == gelu_ids));
    twins += twin ? 1 : 0;
  }
  CHECK(std::abs(twins / double(n) - 0.7) < 0.029);
  for (int k = 0; k < 50; ++k) CHECK(rl::teacher_sample(pool, 1, 0.0, rng).completion_ids == gelu_ids);
  for (int k = 0; k < 50; ++k) CHECK(rl::teacher_sample(pool, 1, 1.0, rng).completion_ids == twin_ids);
  CHECK_THROWS(rl::teacher_sample(pool, 2, 0.7, rng));

  // Off: no twins. Second-turn examples keep the correct solution as their target and have no twin.
  s.exp.train.sft.teacher_error = 0.0;
  CHECK(s.pool(grader).teacher_errors() == 0);
  s.exp.train.sft.teacher_error = 1.0;
  s.exp.train.sft.mutant_kinds = {"comparison", "function"};  // relu's '>' and gelu_tanh's tanh
  s.exp.train.sft.second_turn = 1;
  FixedGrader g2;
  pool = s.pool(g2);
  CHECK(pool.teacher_errors() == 2);
  CHECK(pool.second_turn == 2);
  REQUIRE(pool.samples.size() == 4);
  REQUIRE(pool.teacher_twins.size() == 2);  // one entry per solution sample
  CHECK(pool.teacher_twins[0] == s.policy->encode_completion(rl::systematic_twin(relu, {"comparison"})));
  CHECK(pool.samples[2].completion_ids == s.policy->encode_completion(relu));
  CHECK(pool.samples[3].completion_ids == gelu_ids);
  // Even at probability 1 a second-turn example is drawn with its correct target.
  CHECK(rl::teacher_sample(pool, 2, 1.0, rng).completion_ids == s.policy->encode_completion(relu));
  CHECK(rl::teacher_sample(pool, 3, 1.0, rng).completion_ids == gelu_ids);
  CHECK(rl::teacher_sample(pool, 0, 1.0, rng).completion_ids == pool.teacher_twins[0]);
}

TEST_CASE("sft_lr: constant, or cosine from lr at step 1 to 0 at the last step") {
  config::SftConfig c;
  c.lr = 0.004;
  c.steps = 5;
  for (int64_t k = 1; k <= 5; ++k) CHECK(rl::sft_lr(c, k) == doctest::Approx(0.004));
  c.schedule = "cosine";
  // 0.004 * (1 + cos(pi * (k - 1) / 4)) / 2 for k = 1..5: 1, (1 + 1/sqrt2)/2, 1/2, (1 - 1/sqrt2)/2, 0.
  const double expect[] = {0.004, 0.004 * 0.8535533905932737, 0.002, 0.004 * 0.14644660940672624, 0.0};
  for (int64_t k = 1; k <= 5; ++k) CHECK(rl::sft_lr(c, k) == doctest::Approx(expect[k - 1]).epsilon(1e-12));
  c.steps = 1;  // a single step keeps the full rate
  CHECK(rl::sft_lr(c, 1) == doctest::Approx(0.004));
}

TEST_CASE("CopyExamples: a pool prompt as the context, a window of it as the target, seeded, every start reachable") {
  std::vector<rl::TrainSample> pool(3);
  pool[0].prompt_ids = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  pool[1].prompt_ids = {};  // no prompt: never drawn
  pool[2].prompt_ids = {30, 31, 32};
  pool[2].completion_ids = {99};
  std::mt19937_64 rng(7), again(7);
  const rl::CopyExamples copies(pool, 4);
  const auto a = copies.draw(400, rng);
  const auto b = copies.draw(400, again);
  REQUIRE(a.size() == 400);
  std::set<int64_t> starts0;
  size_t from2 = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    const auto& s = a[k];
    CHECK(s.prompt_ids == b[k].prompt_ids);  // the same seed draws the same examples
    CHECK(s.completion_ids == b[k].completion_ids);
    REQUIRE_FALSE(s.completion_ids.empty());
    if (s.prompt_ids == pool[2].prompt_ids) {
      CHECK(s.completion_ids == pool[2].prompt_ids);  // shorter than the window: the whole prompt
      ++from2;
    } else {
      REQUIRE(s.prompt_ids == pool[0].prompt_ids);
      REQUIRE(s.completion_ids.size() == 4);
      // A contiguous run of the prompt (its ids are consecutive), inside it.
      for (size_t i = 1; i < 4; ++i) CHECK(s.completion_ids[i] == s.completion_ids[i - 1] + 1);
      CHECK(s.completion_ids[0] >= 10);
      CHECK(s.completion_ids.back() <= 19);
      starts0.insert(s.completion_ids[0]);
    }
  }
  CHECK(starts0 == std::set<int64_t>{10, 11, 12, 13, 14, 15, 16});  // every start of a 4-window in 10 tokens
  CHECK(from2 > 100);  // both prompts are drawn (about 200 each)
  CHECK(from2 < 300);
  std::mt19937_64 other(8);
  const auto c = copies.draw(400, other);
  bool differs = false;
  for (size_t k = 0; k < c.size(); ++k) differs = differs || c[k].completion_ids != a[k].completion_ids;
  CHECK(differs);
  const std::vector<rl::TrainSample> no_prompt(2);
  CHECK_THROWS_WITH_AS(rl::CopyExamples(no_prompt, 4), doctest::Contains("no SFT example has a prompt"), Error);
  CHECK_THROWS_WITH_AS(rl::CopyExamples(pool, 0), doctest::Contains("copy_tokens must be >= 1"), Error);
}
