// leap's trainer end to end on the tiny model with a rule-based grader: it learns, and a resumed
// run writes the same steps and rows as an uninterrupted one.
#include <doctest/doctest.h>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <map>
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>
#include <set>

#include "env/task_runtime.hpp"
#include "model/chat_format.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "rl/grader.hpp"
#include "rl/local_policy.hpp"
#include "rl/mutants.hpp"
#include "rl/prompts.hpp"
#include "rl/sft.hpp"
#include "rl/trainer.hpp"
#include "store/database.hpp"
#include "store/statement.hpp"
#include "store/store.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using namespace leap;

TEST_SUITE_BEGIN("rl");

namespace {

const std::string kStarter = std::string(LEAP_SOURCE_DIR) + "/tasks/starter";

using test::tiny_model;

/// Correct iff the completion's first character is in `chars` (none: every answer wrong).
/// Throws on call number `fail_at` (1-based; 0 = never), like a crash in the middle of a step.
struct RuleGrader : rl::Grader {
  std::set<char> chars;
  int calls = 0;
  int fail_at = 0;
  std::vector<env::EvalResult> grade(const std::vector<rl::GradeRequest>& requests) override {
    if (++calls == fail_at) throw Error("grader: simulated crash");
    std::vector<env::EvalResult> out;
    for (const auto& r : requests) {
      const bool ok = !r.answer.empty() && chars.count(r.answer[0]);
      out.push_back(env::EvalResult::make(ok ? env::Verdict::correct : env::Verdict::wrong_output,
                                          ok ? "" : "first character not accepted"));
      if (ok) out.back().speedup = 1.0;
    }
    return out;
  }
};

/// rl::train on `db` with `grader`, run folders under `results`, no progress lines.
rl::TrainSummary train_run(const config::Experiment& exp, store::Store& db, rl::Grader& grader,
                           const std::string& results, std::optional<std::string> resume = std::nullopt) {
  rl::TrainContext ctx;
  ctx.store = &db;
  ctx.grader = &grader;
  ctx.results_dir = results;
  ctx.progress = false;
  ctx.resume_run_id = std::move(resume);
  return rl::train(exp, ctx);
}

config::Experiment small_experiment(const fs::path& model_dir) {
  config::Experiment exp;
  exp.name = "trainer-test";
  exp.model.path = (model_dir / "tiny").string();
  exp.model.device = "cpu";
  exp.tasks.dir = kStarter;
  exp.tasks.limit = 2;
  exp.rollout.tasks_per_step = 2;
  exp.rollout.group_size = 8;
  exp.rollout.max_new_tokens = 3;
  exp.rollout.temperature = 1.0;
  exp.turns.max = 1;
  exp.reward.kind = "binary";
  exp.advantage.kind = "grpo";
  exp.compaction.enabled = false;
  exp.optim.lr = 2e-2;
  exp.train.steps = 8;
  exp.train.mini_batch_size = 16;
  exp.train.eval_every = 0;
  exp.train.checkpoint_every = 0;
  exp.logging.progress = false;
  return exp;
}

/// First characters of 128 completions of 3 tokens (fixed seed) for the first train tasks.
std::vector<char> first_chars(const fs::path& model_dir, const config::Experiment& exp) {
  auto tok = model::Tokenizer::from_file(model_dir);
  auto m = model::load_transformer(model_dir);
  const auto fmt = model::resolve_chat_format(model::ChatFormat::Auto, m->config().model_type_name, tok);
  rl::LocalPolicy policy(m, tok, fmt);
  const auto set = tasks::load_task_set(exp.tasks.dir);
  std::vector<rl::Prompt> prompts;
  const auto train = set.split("train");
  for (int i = 0; i < 128; ++i) prompts.push_back(rl::first_turn_messages(*train[static_cast<size_t>(i % 2)], "cpu"));
  rl::SampleOptions so;
  so.max_new_tokens = 3;
  so.seed = 123;
  std::vector<char> out;
  for (const auto& s : policy.generate(prompts, so)) out.push_back(s.text.empty() ? '\0' : s.text[0]);
  return out;
}

double share_in(const std::vector<char>& chars, const std::set<char>& accepted) {
  double n = 0;
  for (char c : chars) n += accepted.count(c) ? 1 : 0;
  return n / static_cast<double>(chars.size());
}

int64_t scalar(store::Store& db, const std::string& sql) {
  auto st = db.db().prepare(sql);
  REQUIRE(st.step());
  return st.column_int64(0);
}

}  // namespace

TEST_CASE("rl trainer: GRPO raises the share of accepted answers (binary reward, over training seeds)") {
  const fs::path& root = tiny_model();
  auto exp = small_experiment(root);
  // The rule is fixed before training: the most frequent first characters of the untrained
  // model, until they cover at least a fifth of its answers.
  const auto before_chars = first_chars(root / "tiny", exp);
  std::map<char, int> freq;
  for (char c : before_chars) freq[c] += 1;
  std::vector<std::pair<int, char>> by_freq;
  for (auto [c, n] : freq) by_freq.push_back({n, c});
  std::sort(by_freq.rbegin(), by_freq.rend());
  RuleGrader grader;
  for (auto [n, c] : by_freq) {
    if (share_in(before_chars, grader.chars) >= 0.2) break;
    grader.chars.insert(c);
  }
  const double before = share_in(before_chars, grader.chars);
  REQUIRE(before < 0.6);

  // Three training seeds (rollout sampling and shuffling), the same rule and the same measurement.
  // What is asserted is learning, not one seed's luck: the mean gain over the seeds is at least
  // 0.10, about 3 standard errors of that mean under no learning at all (one share of 128
  // answers near 0.3 has a binomial standard error of 0.04, a gain of two such shares 0.057, the
  // mean of three 0.033), and no seed moves the share down.
  const std::vector<int64_t> seeds = {0, 1, 2};
  std::vector<double> gains;
  for (int64_t seed : seeds) {
    CAPTURE(seed);
    exp.train.seed = seed;
    exp.logging.new_logprobs = seed == seeds.back();  // the post-update pass, stored on one seed
    test::TempDir out;
    store::Store db(out.path / "leap.db");
    const auto s = train_run(exp, db, grader, (out.path / "results").string());
    CHECK(s.steps == 8);
    REQUIRE_FALSE(s.checkpoint.empty());
    const double after = share_in(first_chars(s.checkpoint, exp), grader.chars);
    MESSAGE("seed " << seed << ": accepted share before " << before << ", after " << after);
    gains.push_back(after - before);
    if (seed == seeds.front()) {  // the run's rows (once)
      CHECK(db.count_rows("steps") == 8);
      CHECK(db.count_rows("rollouts") == 8 * 2 * 8);
      CHECK(scalar(db, "SELECT COUNT(*) FROM metrics WHERE name = 'loss'") == 8);
      CHECK(scalar(db, "SELECT COUNT(*) FROM turns WHERE old_logprob_mean IS NULL") == 0);
      CHECK(scalar(db, "SELECT COUNT(*) FROM turns WHERE new_logprob_mean IS NOT NULL") == 0);  // off
    }
    if (seed == seeds.back()) {
      CHECK(scalar(db, "SELECT COUNT(*) FROM turns WHERE new_logprob_mean IS NULL") == 0);
      // The policy moved: the post-update means are not the old ones.
      CHECK(scalar(db, "SELECT COUNT(*) FROM turns WHERE new_logprob_mean != old_logprob_mean") > 0);
    }
  }
  double mean = 0;
  for (double g : gains) mean += g / static_cast<double>(gains.size());
  MESSAGE("mean gain " << mean << " over " << gains.size() << " seeds");
  CHECK(mean >= 0.10);
  CHECK(*std::min_element(gains.begin(), gains.end()) > 0.0);
}

TEST_CASE("rl trainer: answers graded infra_error are void: stored, counted, no reward, no sample") {
  const fs::path& root = tiny_model();
  auto exp = small_experiment(root);
  exp.train.steps = 2;
  exp.reward.kind = "rank";
  // Answers starting with one of `chars` are correct; answers whose first character is in `infra`
  // get infra_error (as if the environment had failed for them).
  struct InfraGrader : RuleGrader {
    std::set<char> infra;
    std::vector<env::EvalResult> grade(const std::vector<rl::GradeRequest>& requests) override {
      auto out = RuleGrader::grade(requests);
      for (size_t i = 0; i < requests.size(); ++i)
        if (!requests[i].answer.empty() && infra.count(requests[i].answer[0]))
          out[i] = env::EvalResult::make(env::Verdict::infra_error, "infrastructure error (test)");
      return out;
    }
  } grader;
  grader.chars = {' ', 'e', 't', 'a', 'o'};
  // Void the most frequent first character of the untrained model's answers, so some turns are.
  const auto chars = first_chars(root / "tiny", exp);
  std::map<char, int> freq;
  for (char c : chars) freq[c] += 1;
  char top = chars.front();
  for (auto [c, n] : freq)
    if (n > freq[top]) top = c;
  grader.infra = {top};
  grader.chars.erase(top);
  test::TempDir out;
  {
    store::Store db(out.path / "leap.db");
    const auto s = train_run(exp, db, grader, (out.path / "results").string());
    CHECK(s.steps == 2);
    const int64_t void_turns = scalar(db, "SELECT COUNT(*) FROM turns WHERE verdict = 'infra_error'");
    MESSAGE(void_turns << " infra_error turns");
    REQUIRE(void_turns > 0);
    // Stored with no reward and no advantage, and not trained on (no old log-probs).
    CHECK(scalar(db, "SELECT COUNT(*) FROM turns WHERE verdict = 'infra_error' AND (reward != 0 OR advantage != 0 "
                     "OR old_logprob_mean IS NOT NULL)") == 0);
    CHECK(scalar(db, "SELECT COUNT(*) FROM rollouts r JOIN turns u ON u.rollout_id = r.id WHERE u.verdict = "
                     "'infra_error' AND r.reward != 0") == 0);
    // The other rollouts are trained as usual.
    CHECK(scalar(db, "SELECT COUNT(*) FROM turns WHERE verdict != 'infra_error' AND old_logprob_mean IS NULL") == 0);
    // The step metric counts the void rollouts (turns.max 1: one turn each).
    CHECK(scalar(db, "SELECT CAST(SUM(value) AS INTEGER) FROM metrics WHERE name = 'infra_errors'") == void_turns);
  }
  auto rep = test::run_leap("--db " + (out.path / "leap.db").string() + " report --format csv");
  CAPTURE(rep.err);
  REQUIRE(rep.rc == 0);
  CHECK(rep.out.find("infra_errors") != std::string::npos);
}

TEST_CASE("rl trainer: a run resumed after a crash has the same steps and rows as one that never stopped") {
  const fs::path& root = tiny_model();
  auto exp = small_experiment(root);
  exp.train.steps = 5;
  exp.train.checkpoint_every = 2;
  exp.rollout.group_size = 4;
  exp.eval.temperature = 0.35;  // not the default: `leap eval --run` below samples at the stored value
  auto run = [&](const fs::path& dir, int fail_at, std::optional<std::string> resume) {
    RuleGrader grader;
    grader.chars = {' ', 'e', 't', 'a', 'o', 'i', 'n', 's', '_', '('};
    grader.fail_at = fail_at;
    store::Store db(dir / "leap.db");
    return train_run(exp, db, grader, (dir / "results").string(), resume);
  };
  test::TempDir a, b;
  const auto full = run(a.path, 0, std::nullopt);
  // turns.max = 1: one grader call per step, so call 4 is step 4: step 3 is written, the last
  // checkpoint is step 2.
  std::string run_b;
  try {
    run(b.path, 4, std::nullopt);
    FAIL("the simulated crash did not stop the run");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("simulated crash") != std::string::npos);
  }
  {
    store::Store db(b.path / "leap.db");
    const auto runs = db.list_runs();
    REQUIRE(runs.size() == 1);
    run_b = runs[0].id;
    CHECK(runs[0].status == store::RunStatus::failed);
    CHECK(db.count_rows("steps") == 3);
  }
  const auto resumed = run(b.path, 0, run_b);
  CHECK(resumed.first_step == 3);
  CHECK(resumed.steps == 5);
  store::Store da(a.path / "leap.db"), dbb(b.path / "leap.db");
  for (const char* t : {"steps", "groups", "rollouts", "turns"}) {
    CAPTURE(t);
    CHECK(da.count_rows(t) == dbb.count_rows(t));
  }
  CHECK(scalar(dbb, "SELECT COUNT(*) FROM metrics WHERE name = 'reward_mean'") == 5);
  CHECK(dbb.get_run(run_b)->status == store::RunStatus::finished);
  // Same seeds, same weights at the checkpoint: the resumed steps sample the same answers.
  auto rewards = [](store::Store& db) {
    std::vector<double> v;
    auto st = db.db().prepare(
        "SELECT r.reward FROM rollouts r JOIN groups g ON g.id = r.group_id ORDER BY g.step, g.group_index, "
        "r.rollout_index");
    while (st.step()) v.push_back(st.column_double(0));
    return v;
  };
  CHECK(rewards(da) == rewards(dbb));

  // `leap eval --run` of an older checkpoint records that checkpoint's step, so `leap report`
  // does not take it for the run's final evaluation.
  auto ev = test::run_leap("eval --bench starter --run " + run_b + " --checkpoint 2 --limit 1 --turns 1 --samples 1 "
                           "--set rollout.max_new_tokens=8 --db " + (b.path / "leap.db").string());
  REQUIRE_MESSAGE(ev.rc == 0, ev.err);
  CHECK(scalar(dbb, "SELECT step FROM evaluations WHERE run_id = '" + run_b + "' ORDER BY id DESC LIMIT 1") == 2);
  // Without --config it samples with the run's stored config (eval.temperature 0.35), --set on top.
  CHECK(ev.err.find("the run's stored config") != std::string::npos);
  auto settings = dbb.db().prepare("SELECT json_extract(settings_json, '$.temperature'), "
                                   "json_extract(settings_json, '$.max_new_tokens') FROM evaluations WHERE run_id = ?1 "
                                   "ORDER BY id DESC LIMIT 1");
  settings.bind_text(1, run_b);
  REQUIRE(settings.step());
  CHECK(settings.column_double(0) == doctest::Approx(0.35));
  CHECK(settings.column_int64(1) == 8);
}

TEST_CASE("rl trainer: a crash before the first checkpoint reruns SFT on resume without duplicating its rows") {
  const fs::path& root = tiny_model();
  auto exp = small_experiment(root);
  exp.train.steps = 2;
  exp.train.checkpoint_every = 0;
  exp.rollout.group_size = 2;
  exp.train.sft.enabled = true;
  exp.train.sft.steps = 2;
  exp.train.sft.batch_size = 1;
  test::TempDir dir;
  store::Store db(dir.path / "leap.db");
  auto run = [&](int fail_at, std::optional<std::string> resume, const std::string& results) {
    RuleGrader grader;
    grader.chars = {' ', 'e', 'R', 'T'};
    grader.fail_at = fail_at;
    return train_run(exp, db, grader, results, resume);
  };
  // An unusable results folder (a file) fails before any run row exists.
  const std::string not_a_dir = (dir.path / "file").string();
  { std::ofstream(not_a_dir) << "x"; }
  CHECK_THROWS_WITH_AS(run(0, std::nullopt, not_a_dir), doctest::Contains("results folder"), Error);
  CHECK(db.count_rows("runs") == 0);

  const std::string results = (dir.path / "results").string();
  // Grading call 1 is SFT's check of the shipped solutions (RuleGrader: wrong, left out, when
  // they do not start with an accepted character: relu's starts with 'R', gelu_tanh's with 'T').
  CHECK_THROWS_AS(run(2, std::nullopt, results), Error);  // step 1's grading crashes: no checkpoint
  const auto id = db.list_runs().at(0).id;
  CHECK(scalar(db, "SELECT COUNT(*) FROM metrics WHERE name = 'sft/loss'") == 2);
  const auto s = run(0, id, results);
  CHECK(s.steps == 2);
  CHECK(scalar(db, "SELECT COUNT(*) FROM metrics WHERE name = 'sft/loss'") == 2);
  CHECK(scalar(db, "SELECT COUNT(DISTINCT step) FROM metrics WHERE name = 'sft/loss'") == 2);
  CHECK(scalar(db, "SELECT COUNT(*) FROM events WHERE kind = 'sft' AND message LIKE '2 of 2 steps%'") == 1);
  CHECK(scalar(db, "SELECT COUNT(*) FROM steps") == 2);
}

/// Correct exactly for a task's shipped solution text, wrong_output for anything else; keeps the
/// requests of its first two calls (SFT's check of the shipped solutions, then the first round
/// of the twins' grading).
struct ShippedGrader : rl::Grader {
  std::set<std::string> shipped;
  std::vector<std::string> first_call, second_call;
  std::vector<size_t> call_sizes;  ///< requests per call, in order
  int calls = 0;
  std::vector<env::EvalResult> grade(const std::vector<rl::GradeRequest>& requests) override {
    std::vector<env::EvalResult> out;
    call_sizes.push_back(requests.size());
    for (const auto& r : requests) {
      if (calls == 0) first_call.push_back(r.answer);
      if (calls == 1) second_call.push_back(r.answer);
      const bool ok = shipped.count(r.answer) > 0;
      out.push_back(env::EvalResult::make(ok ? env::Verdict::correct : env::Verdict::wrong_output, ok ? "" : "wrong"));
      if (ok) out.back().speedup = 1.0;
    }
    ++calls;
    return out;
  }
};

TEST_CASE("rl trainer: train.sft.mutants adds one environment-judged wrong twin per shipped solution to SFT") {
  const fs::path& root = tiny_model();
  auto exp = small_experiment(root);
  exp.train.steps = 1;
  exp.rollout.group_size = 2;
  exp.train.sft.enabled = true;
  exp.train.sft.steps = 2;
  exp.train.sft.batch_size = 2;
  exp.train.sft.mutants = 1;
  ShippedGrader grader;
  size_t mutants_total = 0, rounds = 0;
  for (const char* name : {"relu", "gelu_tanh"}) {  // the first two train tasks (tasks.limit 2)
    const auto spec = tasks::load_task(kStarter + "/" + name);
    for (const auto& e : fs::directory_iterator(spec.dir + "/solutions"))
      if (e.path().filename().string().rfind("cpu_", 0) == 0) {
        const std::string text = test::read_file(e.path().string());
        grader.shipped.insert(text);
        mutants_total += std::min<size_t>(8, rl::solution_mutants(text).size());
        rounds = std::max(rounds, std::min<size_t>(8, rl::solution_mutants(text).size()));
      }
  }
  test::TempDir dir;
  store::Store db(dir.path / "leap.db");
  train_run(exp, db, grader, (dir.path / "results").string());
  // The first grading call checks the two shipped solutions; the second is the twins' first
  // round: one mutant per solution (each is wrong, so no second round), none of them shipped.
  CHECK(grader.first_call.size() == 2);
  for (const auto& a : grader.first_call) CHECK(grader.shipped.count(a) == 1);
  CHECK(grader.second_call.size() == 2);
  for (const auto& a : grader.second_call) CHECK(grader.shipped.count(a) == 0);
  auto st = db.db().prepare("SELECT message FROM events WHERE kind = 'sft'");
  REQUIRE(st.step());
  const std::string msg = st.column_text(0);
  CAPTURE(msg);
  CHECK(msg.find("2 of 2 steps on 2 solutions + 2 wrong twins") == 0);
  CHECK(msg.find("relu: line 6: '>' -> '<' (wrong_output)") != std::string::npos);  // relu's only mutant
  CHECK(msg.find("gelu_tanh: line ") != std::string::npos);

  // A grader that judges every mutant correct grades up to 8 per solution (rounds until each is
  // exhausted) and leaves SFT on the shipped solutions alone.
  for (const char* name : {"relu", "gelu_tanh"}) {
    const auto spec = tasks::load_task(kStarter + "/" + name);
    for (const auto& text : rl::shipped_solutions(spec, "cpu"))
      for (const auto& m : rl::solution_mutants(text)) grader.shipped.insert(m.text);
  }
  grader.calls = 0;
  grader.first_call.clear();
  grader.second_call.clear();
  grader.call_sizes.clear();
  store::Store db2(dir.path / "leap2.db");
  train_run(exp, db2, grader, (dir.path / "results2").string());
  REQUIRE(grader.call_sizes.size() > rounds + 1);
  CHECK(grader.call_sizes[0] == 2);  // the shipped solutions
  size_t graded = 0;
  for (size_t k = 1; k <= rounds; ++k) graded += grader.call_sizes[k];
  CHECK(graded == mutants_total);
  auto st2 = db2.db().prepare("SELECT message FROM events WHERE kind = 'sft'");
  REQUIRE(st2.step());
  CHECK(std::string(st2.column_text(0)).find("2 of 2 steps on 2 solutions, loss") == 0);
}

TEST_CASE("rl eval: leap eval --bench --model rolls out with the engine, stores every turn and prints metrics") {
  const fs::path& root = tiny_model();
  test::TempDir out;
  const std::string db = (out.path / "leap.db").string();
  auto r = test::run_leap("eval --bench starter --model " + (root / "tiny").string() +
                          " --limit 2 --turns 2 --samples 2 --set rollout.max_new_tokens=8 --format json --db " + db);
  REQUIRE(r.rc == 0);
  const auto js = nlohmann::json::parse(r.out);
  CHECK(js.contains("metrics"));
  store::Store s(db);
  // 2 tasks x 2 samples; an 8-token answer has no code, so every sample is debugged to turn 2.
  CHECK(s.count_rows("evaluations") == 1);
  CHECK(s.count_rows("eval_results") == 2 * 2 * 2);
  auto bad = test::run_leap("eval --bench no-such-bench --model " + (root / "tiny").string() + " --db " + db);
  CHECK(bad.rc == 2);
  CHECK(bad.err.find("no-such-bench") != std::string::npos);
  // --split eval: exactly the eval split's tasks, as tasks/starter/set.yaml lists them.
  auto sp = test::run_leap("eval --bench starter --model " + (root / "tiny").string() +
                           " --split eval --turns 1 --samples 1 --set rollout.max_new_tokens=4 --db " + db);
  REQUIRE_MESSAGE(sp.rc == 0, sp.err);
  std::set<std::string> want;
  for (const auto& n : YAML::LoadFile(std::string(LEAP_SOURCE_DIR) + "/tasks/starter/set.yaml")["eval"])
    want.insert(n.as<std::string>());
  REQUIRE(want.size() >= 2);
  std::set<std::string> got;
  auto q = s.db().prepare(
      "SELECT DISTINCT t.name FROM eval_results r JOIN tasks t ON t.id = r.task_id WHERE r.evaluation_id = "
      "(SELECT max(id) FROM evaluations)");
  while (q.step()) got.insert(q.column_text(0));
  CHECK(got == want);
  auto none = test::run_leap("eval --bench starter --model " + (root / "tiny").string() + " --split nope --db " + db);
  CHECK(none.rc == 2);
  CHECK(none.err.find("--split") != std::string::npos);
}

TEST_CASE("rl eval: --save-answers keeps each answer as <task>/s<sample>_t<turn>.md with its path in eval_results.file") {
  const fs::path& root = tiny_model();
  test::TempDir out;
  const std::string db = (out.path / "leap.db").string();
  const fs::path answers = out.path / "answers";
  const std::string base = "eval --bench starter --model " + (root / "tiny").string() +
                           " --limit 2 --turns 2 --samples 2 --set rollout.max_new_tokens=24 --set eval.temperature=1.0";
  auto r = test::run_leap(base + " --save-answers " + answers.string() + " --db " + db);
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  store::Store s(db);
  std::map<std::string, std::string> verdict_of;  // "<task>/<file name>" -> verdict
  auto q = s.db().prepare(
      "SELECT t.name, r.sample, r.turn, r.verdict, r.file FROM eval_results r JOIN tasks t ON t.id = r.task_id");
  while (q.step()) {
    const std::string rel = q.column_text(0) + "/s" + std::to_string(q.column_int64(1)) + "_t" +
                            std::to_string(q.column_int64(2)) + ".md";
    CHECK(q.column_text(4) == (answers / rel).string());
    CHECK(fs::is_regular_file(answers / rel));
    verdict_of[rel] = q.column_text(3);
  }
  CHECK(verdict_of.size() == 2 * 2 * 2);
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(answers)) files += e.is_regular_file();
  CHECK(files == verdict_of.size());
  // The saved files are the answers that were graded: `--solutions` grades them to the same verdicts.
  auto again = test::run_leap("eval --tasks " + std::string(LEAP_SOURCE_DIR) + "/tasks/starter --solutions " +
                              answers.string() + " --format json --db " + (out.path / "regrade.db").string());
  REQUIRE_MESSAGE(again.rc == 0, again.err);
  const auto js = nlohmann::json::parse(again.out);
  size_t compared = 0;
  for (const auto& row : js.at("results")) {
    const std::string rel = row.at("task").get<std::string>() + "/" +
                            fs::path(row.at("file").get<std::string>()).filename().string();
    CAPTURE(rel);
    REQUIRE(verdict_of.count(rel) == 1);
    CHECK(row.at("verdict").get<std::string>() == verdict_of[rel]);
    ++compared;
  }
  CHECK(compared == verdict_of.size());
  // A folder that is not new: refused before evaluating, nothing written or stored.
  auto busy = test::run_leap(base + " --save-answers " + answers.string() + " --db " + db);
  CHECK(busy.rc == 2);
  CHECK(busy.err.find("exists and is not empty") != std::string::npos);
  CHECK(s.count_rows("evaluations") == 1);
  auto sol = test::run_leap("eval --tasks tasks/starter --solutions " + answers.string() + " --save-answers " +
                            (out.path / "x").string() + " --db " + db);
  CHECK(sol.rc == 2);
  CHECK(sol.err.find("--save-answers goes with --model or --run") != std::string::npos);
  CHECK_FALSE(fs::exists(out.path / "x"));
  // Sampling and selection flags do nothing for saved answers: refused rather than ignored.
  auto lim = test::run_leap("eval --tasks tasks/starter --solutions " + answers.string() + " --limit 3 --db " + db);
  CHECK(lim.rc == 2);
  CHECK(lim.err.find("--limit goes with --model or --run") != std::string::npos);
  CHECK(s.count_rows("evaluations") == 1);
}

TEST_CASE("rl report: leap report over two short real runs (DCP on and off) shows both and the switch") {
  const fs::path& root = tiny_model();
  test::TempDir out;
  const fs::path db_path = out.path / "leap.db";
  std::vector<std::string> ids;
  for (bool dcp : {true, false}) {
    auto exp = small_experiment(root);
    exp.name = dcp ? "dcp_on" : "dcp_off";
    exp.dcp.enabled = dcp;
    exp.turns.max = 2;
    exp.train.steps = 2;
    exp.rollout.group_size = 4;
    RuleGrader grader;
    grader.chars = {' ', 'e', 't', 'a'};
    store::Store db(db_path);
    ids.push_back(train_run(exp, db, grader, (out.path / "results").string()).run_id);
  }
  auto r = test::run_leap("report --db " + db_path.string());
  REQUIRE(r.rc == 0);
  for (const auto& id : ids) CHECK(r.out.find(id) != std::string::npos);
  CHECK(r.out.find("dcp.enabled") != std::string::npos);
  const fs::path html_dir = out.path / "report";
  auto h = test::run_leap("report --db " + db_path.string() + " --format html --out " + html_dir.string());
  REQUIRE(h.rc == 0);
  const std::string html = test::read_file((html_dir / "report.html").string());
  CHECK(html.find("<html") != std::string::npos);
  CHECK(html.find("</html>") != std::string::npos);
  CHECK(html.find("<svg") != std::string::npos);
  int svgs = 0;
  for (const auto& e : fs::recursive_directory_iterator(html_dir))
    if (e.path().extension() == ".svg") {
      ++svgs;
      const std::string svg = test::read_file(e.path().string());
      CHECK(svg.find("<svg") != std::string::npos);
      CHECK(svg.rfind("</svg>") != std::string::npos);
    }
  CHECK(svgs >= 1);
}

TEST_CASE("rl trainer: a c10::Error or std::bad_alloc leaving train() marks the run failed, naming type and message") {
  const fs::path& root = tiny_model();
  for (const std::string kind : {"c10::Error", "std::bad_alloc"}) {
    CAPTURE(kind);
    auto exp = small_experiment(root);
    exp.train.steps = 3;
    exp.rollout.group_size = 2;
    RuleGrader grader;
    grader.chars = {' ', 'e', 't', 'a'};
    test::TempDir out;
    store::Store db(out.path / "leap.db");
    rl::TrainContext ctx;
    ctx.store = &db;
    ctx.grader = &grader;
    ctx.results_dir = (out.path / "results").string();
    ctx.progress = false;
    std::vector<std::string> blocks;
    ctx.fault_hook = [&](std::string_view block, int64_t step) {
      blocks.push_back(std::string(block) + "@" + std::to_string(step));
      if (block != "update" || step != 2) return;
      if (kind == "c10::Error") TORCH_CHECK(false, "CUDA out of memory (injected)");
      throw std::bad_alloc();
    };
    std::string message;
    try {
      rl::train(exp, ctx);
      FAIL("the injected exception did not leave train()");
    } catch (const Error& e) {
      message = e.what();
    }
    CAPTURE(message);
    CHECK(message.find(kind) != std::string::npos);
    if (kind == "c10::Error") {
      CHECK(message.find("CUDA out of memory (injected)") != std::string::npos);
      CHECK(message.find("Exception raised from") == std::string::npos);  // one line, no backtrace
    }
    // Step 1 ran every block in order; step 2 stopped at its update.
    CHECK(blocks == std::vector<std::string>{"rollouts@1", "rewards@1", "samples@1", "update@1", "metrics@1",
                                             "store@1", "eval@1", "checkpoint@1", "rollouts@2", "rewards@2",
                                             "samples@2", "update@2"});
    const auto runs = db.list_runs();
    REQUIRE(runs.size() == 1);
    CHECK(runs[0].status == store::RunStatus::failed);
    CHECK(db.count_rows("steps") == 1);
    auto st = db.db().prepare("SELECT message FROM events WHERE kind = 'error'");
    REQUIRE(st.step());
    const std::string event = st.column_text(0);
    CAPTURE(event);
    CHECK(event.rfind(kind + ": ", 0) == 0);
    if (kind == "c10::Error") CHECK(event.find("CUDA out of memory (injected)") != std::string::npos);
    else CHECK(event.find("bad_alloc") != std::string::npos);
    CHECK_FALSE(st.step());  // one error event
  }
}

TEST_CASE("rl trainer: loss.aggregation is honoured with compaction on, and the run row stores the resolved value") {
  // Compaction on with a budget no prompt reaches: every rollout is one segment. DCP off, so a
  // failed rollout is debugged up to 3 turns and rollouts have 1 to 3 turns of 3 tokens: the
  // token mean and the segment mean weigh turns differently. One optimizer step per RL step
  // (mini-batch 64), so the step-1 loss is -sum_i w_i n_i A_i at ratio 1 (no clipping): the test
  // computes it from the stored turns for each aggregation.
  const fs::path& root = tiny_model();
  std::map<std::string, double> loss_of;
  for (const std::string agg : {"auto", "token_mean", "segment_mean"}) {
    CAPTURE(agg);
    auto exp = small_experiment(root);
    exp.compaction.enabled = true;
    exp.compaction.max_prompt_tokens = 1000000;
    exp.loss.aggregation = agg;
    exp.turns.max = 3;
    exp.dcp.enabled = false;
    exp.train.steps = 1;
    exp.rollout.group_size = 4;
    exp.train.mini_batch_size = 64;
    RuleGrader grader;
    grader.chars = {' ', 'e', 't', 'a', 'o'};
    test::TempDir out;
    store::Store db(out.path / "leap.db");
    const auto s = train_run(exp, db, grader, (out.path / "results").string());
    const std::string resolved = agg == "auto" ? "segment_mean" : agg;
    CHECK(db.get_run(s.run_id)->config_yaml.find("aggregation: \"" + resolved + "\"") != std::string::npos);
    // Stored turns: rollout id, tokens, advantage.
    std::map<int64_t, std::vector<std::pair<double, double>>> by_rollout;
    auto st = db.db().prepare("SELECT rollout_id, completion_tokens, advantage FROM turns ORDER BY id");
    double total_tokens = 0;
    while (st.step()) {
      by_rollout[st.column_int64(0)].push_back({static_cast<double>(st.column_int64(1)), st.column_double(2)});
      total_tokens += static_cast<double>(st.column_int64(1));
    }
    std::set<size_t> lengths;
    for (const auto& [id, turns] : by_rollout) lengths.insert(turns.size());
    REQUIRE(lengths.size() > 1);  // rollouts of different lengths, else both means agree
    double want = 0, segments = 0;
    for (const auto& [id, turns] : by_rollout) {
      double tok = 0, adv_tok = 0;
      for (auto [n, a] : turns) tok += n, adv_tok += n * a;
      if (resolved == "token_mean") want -= adv_tok / total_tokens;
      else if (tok > 0) want -= adv_tok / tok, segments += 1;
    }
    if (resolved == "segment_mean") want /= segments;
    auto ls = db.db().prepare("SELECT value FROM metrics WHERE name = 'loss' AND step = 1");
    REQUIRE(ls.step());
    loss_of[agg] = ls.column_double(0);
    CHECK(loss_of[agg] == doctest::Approx(want).epsilon(1e-4));
  }
  // The same rollouts (same seeds and weights before the update), different update weights.
  CHECK(loss_of["auto"] == doctest::Approx(loss_of["segment_mean"]).epsilon(1e-9));
  CHECK(loss_of["token_mean"] != doctest::Approx(loss_of["segment_mean"]).epsilon(1e-4));
}

TEST_CASE("rl local policy: a rollout copy samples what the policy samples and follows its updates at every generate") {
  // The trainer's GPU path (issue 48): rollouts from a copy of the weights (here in fp32, so the
  // samples are comparable token for token), refreshed at each generate() call.
  const fs::path& root = tiny_model();
  const fs::path dir = root / "tiny";
  auto tok = model::Tokenizer::from_file(dir);
  auto m = model::load_transformer(dir);
  const auto fmt = model::resolve_chat_format(model::ChatFormat::Auto, m->config().model_type_name, tok);
  rl::LocalPolicy plain(m, tok, fmt);
  rl::LocalPolicy copied(m, tok, fmt);
  copied.use_rollout_copy(torch::kFloat32);
  CHECK(copied.has_rollout_copy());
  const auto set = tasks::load_task_set(LEAP_SOURCE_DIR "/tasks/starter");
  std::vector<rl::Prompt> prompts;
  for (const auto* t : set.split("train")) {
    prompts.push_back(rl::first_turn_messages(*t, "cpu"));
    if (prompts.size() == 4) break;
  }
  rl::SampleOptions so;
  so.max_new_tokens = 12;
  so.seed = 5;
  so.temperature = 1.0;
  const auto ids = [](const std::vector<rl::Sample>& s) {
    std::vector<std::vector<int64_t>> out;
    for (const auto& x : s) out.push_back(x.completion_ids);
    return out;
  };
  CHECK(ids(plain.generate(prompts, so)) == ids(copied.generate(prompts, so)));
  // An "optimizer step" on the policy's weights: the copy samples from the new weights.
  const auto before = ids(plain.generate(prompts, so));
  {
    torch::NoGradGuard ng;
    torch::manual_seed(9);
    for (auto& p : m->parameters()) p.add_(torch::randn_like(p) * 0.5);
  }
  const auto after = ids(plain.generate(prompts, so));
  CHECK(after != before);  // the update changed what the policy samples
  CHECK(ids(copied.generate(prompts, so)) == after);
}
