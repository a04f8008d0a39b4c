// The rollout engine with a scripted policy and the real cpu environment: turns, DCP, compaction,
// scores, and the rows the store keeps.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "cli/environment.hpp"
#include "env/task_runtime.hpp"
#include "rl/grader.hpp"
#include "rl/prompts.hpp"
#include "rl/rollout.hpp"
#include "rl/scoring.hpp"
#include "rl/step_record.hpp"
#include "store/database.hpp"
#include "store/statement.hpp"
#include "store/store.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using namespace leap;

TEST_SUITE_BEGIN("rl");

namespace {

const std::string kStarter = std::string(LEAP_SOURCE_DIR) + "/tasks/starter";

std::string cpu_solution(const std::string& task) {
  for (const auto& e : fs::directory_iterator(kStarter + "/" + task + "/solutions"))
    if (e.path().filename().string().rfind("cpu_", 0) == 0) return test::read_file(e.path().string());
  FAIL("no cpu solution for " << task);
  return {};
}

/// Answers from a script: (task, turn, k-th prompt of that task in the call) -> correct or not.
/// A wrong answer has no code block (format_error). Token counts are characters.
struct ScriptedPolicy : rl::Policy {
  std::map<std::tuple<std::string, int, int>, bool> correct;
  std::vector<rl::Prompt> seen;  ///< every prompt, in call order
  std::vector<rl::Sample> generate(const std::vector<rl::Prompt>& prompts, const rl::SampleOptions&) override {
    std::map<std::pair<std::string, int>, int> k;
    std::vector<rl::Sample> out;
    for (const auto& p : prompts) {
      seen.push_back(p);
      const std::string& user = p.at(1).content;
      const size_t a = user.find("Task ") + 5;
      const std::string task = user.substr(a, user.find(':', a) - a);
      int turn = 1;
      for (const auto& m : p) turn += m.role == "assistant" ? 1 : 0;
      const size_t at = user.find("Your latest attempt (attempt ");
      if (at != std::string::npos) turn = std::stoi(user.substr(at + 29)) + 1;
      const int idx = k[{task, turn}]++;
      rl::Sample s;
      s.text = correct.count({task, turn, idx}) && correct.at({task, turn, idx}) ? cpu_solution(task) : "I don't know.";
      s.prompt_ids.assign(count_tokens(p), 1);
      s.completion_ids.assign(s.text.size(), 2);
      out.push_back(std::move(s));
    }
    return out;
  }
  int64_t count_tokens(const rl::Prompt& p) override {
    int64_t n = 0;
    for (const auto& m : p) n += static_cast<int64_t>(m.content.size());
    return n;
  }
};

config::EnvConfig fast_env(const std::string& cache) {
  config::EnvConfig e;
  e.workers = 2;
  e.seeds = 2;
  e.cache_dir = cache;
  e.cpu.flags = "-O1 -fPIC -shared";
  e.timing.warmup = 1;
  e.timing.trials = 2;
  e.timing.max_seconds = 0.1;
  // Verdicts are what these tests check: a loaded 2-core CI machine (the dist tests run beside
  // them) must not turn a correct answer into a `timeout`.
  e.run_timeout_s = 60;
  return e;
}

struct Fixture {
  test::TempDir dir;
  std::unique_ptr<cli::Environment> env;
  std::unique_ptr<rl::VerifierGrader> grader;
  std::vector<std::unique_ptr<env::RuntimeTask>> owned;
  std::vector<const env::RuntimeTask*> tasks;
  Fixture() {
    env = cli::make_environment(fast_env((dir.path / "cache").string()), "cpu");
    grader = std::make_unique<rl::VerifierGrader>(*env->verifier, 2);
    for (const char* name : {"relu", "tanh"}) {
      owned.push_back(std::make_unique<env::RuntimeTask>(tasks::load_task(kStarter + "/" + name), "cpu"));
      tasks.push_back(owned.back().get());
    }
  }
};

/// Group "relu": rollouts 0, 1 correct at turn 1; 2 correct at turn 2; 3 never (f = 2/4 = 0.5:
/// expanded). Group "tanh": all four fail turn 1 (f = 1 > 0.875: pruned).
void script(ScriptedPolicy& p) {
  p.correct[{"relu", 1, 0}] = true;
  p.correct[{"relu", 1, 1}] = true;
  p.correct[{"relu", 2, 0}] = true;  // rollout 2 is the first active one at turn 2
}

/// The scripted groups (script()) of 4 rollouts, up to `max_turns` turns, no compaction.
std::vector<rl::GroupResult> run_scripted(Fixture& f, int max_turns, rl::EngineStats* st) {
  ScriptedPolicy policy;
  script(policy);
  rl::EngineOptions o;
  o.max_turns = max_turns;
  o.compaction = false;
  rl::RolloutEngine engine(policy, *f.grader, o);
  return engine.run(f.tasks, 4, 7, st);
}

/// Writes `groups` as step 1 of a new run named `name` in `db` (the rows the trainer writes).
void write_step(store::Store& db, const std::string& name, const std::vector<rl::GroupResult>& groups,
                const std::vector<std::vector<rl::ScoredRollout>>& scored, const std::vector<const env::RuntimeTask*>& tasks) {
  store::RunInfo info;
  info.name = name;
  info.config_yaml = "{}";
  info.config_hash = "0";
  info.git_commit = "test";
  info.hostname = "test";
  store::StepRecord rec;
  rec.run_id = db.create_run(info);
  rec.step = 1;
  rec.groups = rl::group_records(groups, scored, tasks, "starter", {}, true);
  db.write_step(rec);
}

}  // namespace

TEST_CASE("rl engine: DCP expands the mixed group, prunes the all-failed one, rows match") {
  Fixture f;
  rl::EngineStats st;
  const auto groups = run_scripted(f, 3, &st);
  REQUIRE(groups.size() == 2);
  const auto& a = groups[0];
  const auto& b = groups[1];
  CHECK(a.dcp.expand);
  CHECK(a.dcp.fail_ratio == doctest::Approx(0.5));
  CHECK_FALSE(b.dcp.expand);
  CHECK(b.dcp.fail_ratio == doctest::Approx(1.0));
  CHECK(a.rollouts[0].turns.size() == 1);
  CHECK(a.rollouts[1].turns.size() == 1);
  CHECK(a.rollouts[2].turns.size() == 2);
  CHECK(a.rollouts[3].turns.size() == 3);
  for (const auto& ro : b.rollouts) CHECK(ro.turns.size() == 1);
  CHECK(a.rollouts[2].first_success() == 2);
  CHECK(a.rollouts[3].first_success() == 0);
  CHECK(a.recovered == 1);
  CHECK(a.rollouts[2].turns[1].result.verdict == env::Verdict::correct);
  CHECK(a.rollouts[3].turns[2].result.verdict == env::Verdict::format_error);
  // 8 turn-1 calls + rollouts 2 and 3 at turn 2 + rollout 3 at turn 3.
  CHECK(st.env_calls == 11);
  // The pruned group's 4 failures would each have had 2 more turns.
  CHECK(st.env_calls_saved == 8);
  CHECK(b.env_calls_saved == 8);
  // Turn 2 sees turn 1's answer and its verdict.
  const auto& p2 = a.rollouts[3].turns[1].prompt;
  REQUIRE(p2.size() == 4);
  CHECK(p2[2].role == "assistant");
  CHECK(p2[2].content == "I don't know.");
  CHECK(p2[3].content.find("Result: format_error") != std::string::npos);

  // Rank reward without later keys: relu k = {1, 1, 2, inf}.
  config::Experiment exp;
  exp.reward.kind = "rank";
  exp.reward.rank_keys = {};
  exp.turns.gamma = 0.4;
  const auto sa = rl::score_group(a, exp);
  // rollout 0: beats 2 and 3, ties 1 -> (2 - 0) / 3; rollout 2: beats 3, loses to 0, 1 -> -1/3.
  CHECK(sa[0].reward == doctest::Approx(2.0 / 3));
  CHECK(sa[1].reward == doctest::Approx(2.0 / 3));
  CHECK(sa[2].reward == doctest::Approx(-1.0 / 3));
  CHECK(sa[3].reward == doctest::Approx(-1.0));
  // A <= 0 reaches every turn unchanged.
  REQUIRE(sa[3].turn_advantages.size() == 3);
  CHECK(sa[3].turn_advantages[0] == doctest::Approx(-1.0));
  CHECK(sa[3].turn_advantages[2] == doctest::Approx(-1.0));
  CHECK(sa[0].reward_binary == 1.0);
  CHECK(sa[3].reward_binary == 0.0);
  // Binary + grpo: scores {1, 1, 1, 0}, mean 0.75, squared deviations 3 * 0.0625 + 0.5625 = 0.75,
  // unbiased std sqrt(0.75 / 3) = 0.5.
  config::Experiment bin = exp;
  bin.reward.kind = "binary";
  bin.advantage.kind = "grpo";
  const auto sbin = rl::score_group(a, bin);
  CHECK(sbin[2].reward == 1.0);  // success at turn 2 counts like turn 1: the dilution LEAP criticises
  CHECK(sbin[0].advantage == doctest::Approx(0.25 / 0.5).epsilon(1e-4));
  REQUIRE(sbin[3].turn_advantages.size() == 3);
  for (double v : sbin[3].turn_advantages) CHECK(v == doctest::Approx(-0.75 / 0.5).epsilon(1e-4));
  const auto sb = rl::score_group(b, exp);
  for (const auto& s : sb) CHECK(s.reward == 0.0);

  // The store keeps every group, rollout and turn.
  test::TempDir d;
  store::Store db(d.path / "leap.db");
  write_step(db, "engine-test", groups, {sa, sb}, f.tasks);
  CHECK(db.count_rows("groups") == 2);
  CHECK(db.count_rows("rollouts") == 8);
  CHECK(db.count_rows("turns") == 11);
  auto q = db.db().prepare(
      "SELECT g.dcp_activated, r.reward, r.first_success_turn, COUNT(t.id) FROM groups g "
      "JOIN rollouts r ON r.group_id = g.id JOIN turns t ON t.rollout_id = r.id "
      "WHERE g.group_index = 0 GROUP BY r.id ORDER BY r.rollout_index");
  std::vector<int64_t> turns;
  std::vector<double> rewards;
  while (q.step()) {
    CHECK(q.column_int64(0) == 1);
    rewards.push_back(q.column_double(1));
    turns.push_back(q.column_int64(3));
  }
  CHECK(turns == std::vector<int64_t>{1, 1, 2, 3});
  REQUIRE(rewards.size() == 4);
  CHECK(rewards[2] == doctest::Approx(-1.0 / 3));
  auto v = db.db().prepare("SELECT verdict, feedback FROM turns WHERE verdict = 'correct'");
  int correct = 0;
  while (v.step()) ++correct;
  CHECK(correct == 3);
}

TEST_CASE("rl engine: a debugging tree (branch 2) grows, respects the env-call cap, and its stored nodes rebuild it") {
  Fixture f;
  ScriptedPolicy policy;
  // Group relu, 2 rollouts: both fail turn 1; at turn 2 the second child of rollout 0 passes.
  policy.correct[{"relu", 2, 1}] = true;
  rl::EngineOptions o;
  o.max_turns = 3;
  o.branch = 2;
  o.compaction = false;
  o.dcp.enabled = false;
  std::vector<const env::RuntimeTask*> relu = {f.tasks[0]};
  rl::EngineStats st;
  auto groups = rl::RolloutEngine(policy, *f.grader, o).run(relu, 2, 7, &st);
  REQUIRE(groups.size() == 1);
  const auto& ro0 = groups[0].rollouts[0];
  const auto& ro1 = groups[0].rollouts[1];
  // Rollout 0: root, 2 children (the second passed), 2 grandchildren of the failed child.
  // Rollout 1: root, 2 failed children, 2 grandchildren each. 2 + 4 + 6 graded turns.
  CHECK(st.env_calls == 12);
  REQUIRE(ro0.turns.size() == 5);
  REQUIRE(ro1.turns.size() == 7);
  std::vector<int> parents0, turns0, parents1;
  for (const auto& t : ro0.turns) parents0.push_back(t.parent), turns0.push_back(t.turn);
  for (const auto& t : ro1.turns) parents1.push_back(t.parent);
  CHECK(parents0 == std::vector<int>{-1, 0, 0, 1, 1});
  CHECK(turns0 == std::vector<int>{1, 2, 2, 3, 3});
  CHECK(parents1 == std::vector<int>{-1, 0, 0, 1, 1, 2, 2});
  CHECK(ro0.turns[2].result.is_correct());
  CHECK(ro0.first_success() == 2);
  CHECK(groups[0].recovered == 1);
  // A grandchild's context continues its own parent's answer and feedback, not a sibling's.
  const auto& p3 = ro0.turns[3].prompt;
  REQUIRE(p3.size() == 6);
  CHECK(p3[4].content == ro0.turns[1].sample.text);
  CHECK(p3[4].content != ro0.turns[2].sample.text);

  // The stored nodes (node_index, parent_index, turn_index) rebuild both trees exactly.
  config::Experiment exp;
  exp.reward.kind = "binary";
  exp.turns.branch = 2;
  exp.advantage.kind = "sae";
  const auto scored = rl::score_group(groups[0], exp);
  test::TempDir d;
  store::Store db(d.path / "leap.db");
  write_step(db, "tree-test", groups, {scored}, relu);
  auto q = db.db().prepare(
      "SELECT r.rollout_index, t.node_index, t.parent_index, t.turn_index, t.verdict, t.advantage FROM turns t "
      "JOIN rollouts r ON r.id = t.rollout_id ORDER BY r.rollout_index, t.node_index");
  std::vector<std::vector<int>> parents(2);
  int rows = 0;
  while (q.step()) {
    const auto i = static_cast<size_t>(q.column_int64(0));
    const auto n = static_cast<size_t>(q.column_int64(1));
    REQUIRE(n == parents[i].size());
    parents[i].push_back(q.column_is_null(2) ? -1 : static_cast<int>(q.column_int64(2)));
    const auto& t = groups[0].rollouts[i].turns[n];
    CHECK(q.column_int64(3) == t.turn);
    CHECK(q.column_text(4) == std::string(env::to_string(t.result.verdict)));
    CHECK(q.column_double(5) == doctest::Approx(scored[i].turn_advantages[n]));
    ++rows;
  }
  CHECK(rows == 12);
  CHECK(parents[0] == parents0);
  CHECK(parents[1] == parents1);
  // A tree's final verdict: correct when any node passed (rollout 0's last node failed).
  auto fv = db.db().prepare("SELECT final_verdict FROM rollouts ORDER BY rollout_index");
  std::vector<std::string> finals;
  while (fv.step()) finals.push_back(fv.column_text(0));
  CHECK(finals == std::vector<std::string>{"correct", "format_error"});

  // A cap of 8 graded turns: 2 + 4, then one grandchild each for the first two expandable
  // attempts (round-robin: first children first).
  ScriptedPolicy capped;
  capped.correct[{"relu", 2, 1}] = true;
  o.max_env_calls = 8;
  rl::EngineStats st2;
  groups = rl::RolloutEngine(capped, *f.grader, o).run(relu, 2, 7, &st2);
  CHECK(st2.env_calls == 8);
  std::vector<int> capped0, capped1;
  for (const auto& t : groups[0].rollouts[0].turns) capped0.push_back(t.parent);
  for (const auto& t : groups[0].rollouts[1].turns) capped1.push_back(t.parent);
  CHECK(capped0 == std::vector<int>{-1, 0, 0, 1});
  CHECK(capped1 == std::vector<int>{-1, 0, 0, 1});
}

TEST_CASE("rl engine: siblings of a tree share one compact record and one summary") {
  Fixture f;
  ScriptedPolicy policy;
  rl::EngineOptions o;
  o.max_turns = 3;
  o.branch = 2;
  o.dcp.enabled = false;
  o.compaction = true;
  o.compaction_strategy = "summary";
  o.max_prompt_tokens = 1200;  // characters with the scripted policy: every turn 2 and 3 context
  o.summary_max_tokens = 64;
  std::vector<const env::RuntimeTask*> relu = {f.tasks[0]};
  const auto groups = rl::RolloutEngine(policy, *f.grader, o).run(relu, 1, 7, nullptr);
  const auto& ro = groups[0].rollouts[0];
  REQUIRE(ro.turns.size() == 7);  // 1 + 2 + 4
  // Turn 2's two children of the root: one summary, the same compact prompt.
  CHECK(ro.turns[1].compacted);
  CHECK((ro.turns[1].prompt == ro.turns[2].prompt));
  CHECK((ro.turns[3].prompt == ro.turns[4].prompt));  // children of node 1
  CHECK((ro.turns[5].prompt == ro.turns[6].prompt));  // children of node 2
  // (nodes 1 and 2 wrote the same scripted answer, so their children's records read the same,
  // but each parent's record was made once: three summaries below.)
  // One summary per expanded attempt (root, node 1, node 2), each credited to its first child.
  REQUIRE(ro.summaries.size() == 3);
  CHECK(ro.summaries[0].next_turn == 1);
  CHECK(ro.summaries[1].next_turn == 3);
  CHECK(ro.summaries[2].next_turn == 5);
}

TEST_CASE("rl engine: knowledge-base notes reach turn 1's task and the feedback after a failure, and are stored") {
  Fixture f;
  test::TempDir kbdir;
  fs::create_directories(kbdir.path);
  std::ofstream(kbdir.path / "relu.md") << "---\ntitle: Clamp at zero\nbackend: cpu\nops: [relu]\n---\nUse fmaxf(x, 0).\n";
  std::ofstream(kbdir.path / "tanh.md") << "---\ntitle: Tanh\nbackend: cpu\nops: [tanh]\n---\nUse tanhf.\n";
  std::ofstream(kbdir.path / "fmt.md")
      << "---\ntitle: Answer format\nbackend: cpu\nverdicts: [format_error]\n---\nOne ```cpp block and one ```yaml plan.\n";
  ScriptedPolicy policy;
  rl::EngineOptions o;
  o.max_turns = 3;
  o.compaction = false;
  o.dcp.enabled = false;
  o.kb = std::make_shared<const rl::KnowledgeBase>(rl::KnowledgeBase::load(kbdir.path.string()));
  std::vector<const env::RuntimeTask*> relu = {f.tasks[0]};
  auto groups = rl::RolloutEngine(policy, *f.grader, o).run(relu, 2, 7, nullptr);
  const auto& ro = groups[0].rollouts[0];
  REQUIRE(ro.turns.size() == 3);
  const std::string task_msg = ro.turns[0].prompt.at(1).content;
  CHECK(task_msg.find("Notes from the knowledge base:\n### Clamp at zero\nUse fmaxf(x, 0).") != std::string::npos);
  CHECK(task_msg.find("Tanh") == std::string::npos);
  CHECK(ro.turns[0].kb_snippets == std::vector<std::string>{"relu"});
  // The format_error's feedback carries the format note once; turn 3's feedback does not repeat it.
  const std::string fb2 = ro.turns[1].prompt.back().content;
  CHECK(fb2.rfind("Result: format_error", 0) == 0);
  CHECK(fb2.find("### Answer format") != std::string::npos);
  CHECK(ro.turns[1].kb_snippets == std::vector<std::string>{"fmt"});
  CHECK(ro.turns[2].prompt.back().content.find("### Answer format") == std::string::npos);
  CHECK(ro.turns[2].kb_snippets.empty());
  // kb.where: feedback leaves the task message as it was; a budget of 1 token adds nothing.
  o.kb_options.prompt = false;
  groups = rl::RolloutEngine(policy, *f.grader, o).run(relu, 1, 7, nullptr);
  CHECK(groups[0].rollouts[0].turns[0].prompt.at(1).content.find("knowledge base") == std::string::npos);
  CHECK(groups[0].rollouts[0].turns[1].kb_snippets == std::vector<std::string>{"fmt"});
  o.kb_options.max_tokens = 1;
  groups = rl::RolloutEngine(policy, *f.grader, o).run(relu, 1, 7, nullptr);
  for (const auto& t : groups[0].rollouts[0].turns) CHECK(t.kb_snippets.empty());

  // Compaction rebuilds the context from the task and the attempts: the latest feedback's notes
  // are appended to the compact record again (a 1200-character budget compacts every turn 2).
  o.kb_options = {};
  o.compaction = true;
  o.max_prompt_tokens = 1200;
  groups = rl::RolloutEngine(policy, *f.grader, o).run(relu, 1, 7, nullptr);
  {
    const auto& t2 = groups[0].rollouts[0].turns.at(1);
    REQUIRE(t2.compacted);
    CHECK(t2.prompt.size() == 2);  // [system, compact record]
    CHECK(t2.prompt.back().content.find("### Answer format") != std::string::npos);
    CHECK(t2.kb_snippets == std::vector<std::string>{"fmt"});
  }
  o.compaction = false;

  // The store keeps each turn's snippet ids.
  config::Experiment exp;
  exp.reward.kind = "binary";
  o.kb_options = {};
  groups = rl::RolloutEngine(policy, *f.grader, o).run(relu, 2, 7, nullptr);
  test::TempDir d;
  store::Store db(d.path / "leap.db");
  write_step(db, "kb-test", groups, {rl::score_group(groups[0], exp)}, relu);
  auto q = db.db().prepare("SELECT turn_index, kb_snippets FROM turns ORDER BY id");
  std::vector<std::string> stored;
  while (q.step()) stored.push_back(std::to_string(q.column_int64(0)) + ":" + q.column_text(1));
  CHECK(stored == std::vector<std::string>{"1:relu", "2:fmt", "3:", "1:relu", "2:fmt", "3:"});
}

TEST_CASE("rl engine: with one turn no group is activated, whatever its failure ratio") {
  Fixture f;
  rl::EngineStats st;
  const auto groups = run_scripted(f, 1, &st);  // "relu" fails half its rollouts: activated with more turns
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].dcp.fail_ratio == doctest::Approx(0.5));
  CHECK_FALSE(groups[0].dcp.expand);
  CHECK_FALSE(groups[1].dcp.expand);
  CHECK(st.env_calls_saved == 0);
  for (const auto& g : groups)
    for (const auto& ro : g.rollouts) CHECK(ro.turns.size() == 1);
}

TEST_CASE("rl engine: DCP off expands every failure, compaction replaces earlier turns by a digest") {
  Fixture f;
  ScriptedPolicy policy;
  script(policy);
  rl::EngineOptions o;
  o.max_turns = 3;
  o.dcp.enabled = false;
  o.compaction = true;
  o.compaction_strategy = "digest";
  // Turn 1's prompt fits; any context that carries an earlier attempt does not.
  const int64_t first = policy.count_tokens(rl::Prompt{{"system", rl::system_prompt("cpu")},
                                                      {"user", rl::task_message(f.tasks[1]->spec(), "cpu")}});
  o.max_prompt_tokens = first + 20;
  rl::RolloutEngine engine(policy, *f.grader, o);
  rl::EngineStats st;
  const auto groups = engine.run(f.tasks, 4, 7, &st);
  const auto& b = groups[1];
  CHECK(b.dcp.expand);  // DCP off: failures are expanded even when all failed
  for (const auto& ro : b.rollouts) {
    REQUIRE(ro.turns.size() == 3);
    CHECK_FALSE(ro.turns[0].compacted);
    CHECK(ro.turns[1].compacted);
    CHECK(ro.turns[1].segment == 1);
    CHECK(ro.turns[2].segment == 2);
    const auto& user = ro.turns[2].prompt.at(1).content;
    CHECK(ro.turns[2].prompt.size() == 2);
    // Turn 3: attempt 1 as a verdict line; attempt 2, the latest, once: its code and its result.
    CHECK(user.find("Your earlier attempts:\nattempt 1: format_error") != std::string::npos);
    CHECK(user.find("attempt 2: format_error") == std::string::npos);
    CHECK(user.find("Your latest attempt (attempt 2):\n" + ro.turns[1].sample.text) != std::string::npos);
    CHECK(user.find("Result: format_error") != std::string::npos);
    // Turn 2: the latest attempt is the only one, so no verdict lines and no heading.
    const auto& user2 = ro.turns[1].prompt.at(1).content;
    CHECK(user2.find("Your earlier attempts") == std::string::npos);
    CHECK(user2.find("attempt 1: ") == std::string::npos);
    CHECK(user2.find("Your latest attempt (attempt 1):\n" + ro.turns[0].sample.text) != std::string::npos);
    CHECK(ro.compactions == 2);
  }
  // relu: 2 turn-1 failures + rollout 3 at turn 2 -> compactions 2 + 1 (rollout 3 twice, rollout 2 once).
  CHECK(st.compaction_events == 4 * 2 + 3);
  CHECK(st.tokens_saved > 0);
  CHECK(st.env_calls == 8 + 2 + 1 + 4 + 4);
}

TEST_CASE("rl engine: a turn-2 context is next_turn_context of turn 1, the answer and the environment's feedback") {
  // The SFT warm start's second-turn examples (train.sft.second_turn) build their contexts with
  // next_turn_context; this pins that the engine's turn 2 is the same text, written out by hand.
  Fixture f;
  ScriptedPolicy policy;  // every answer "I don't know.": a format_error from the real environment
  rl::EngineOptions o;
  o.max_turns = 2;
  o.dcp.enabled = false;
  o.compaction = false;
  rl::RolloutEngine engine(policy, *f.grader, o);
  const auto groups = engine.run({f.tasks[0]}, 1, 3, nullptr);
  REQUIRE(groups.at(0).rollouts.at(0).turns.size() == 2);
  const auto& t1 = groups[0].rollouts[0].turns[0];
  const auto& t2 = groups[0].rollouts[0].turns[1];
  REQUIRE(t1.result.verdict == env::Verdict::format_error);
  REQUIRE_FALSE(t1.result.feedback.empty());
  const rl::Prompt turn1 = rl::first_turn_messages(f.tasks[0]->spec(), "cpu");
  auto same = [](const rl::Prompt& a, const rl::Prompt& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i].role != b[i].role || a[i].content != b[i].content) return false;
    return true;
  };
  CHECK(same(t1.prompt, turn1));
  rl::Prompt by_hand = turn1;
  by_hand.push_back({"assistant", "I don't know."});
  by_hand.push_back({"user", "Result: format_error\n" + t1.result.feedback +
                                 (t1.result.feedback.back() == '\n' ? "" : "\n") +
                                 "Fix the problem and answer again in the same format."});
  CHECK(same(t2.prompt, by_hand));
  CHECK(same(t2.prompt, rl::next_turn_context(turn1, "<think>x</think>I don't know.", "format_error",
                                              t1.result.feedback, t1.result.speedup)));
}

TEST_CASE("rl prompts: think spans are dropped from later contexts") {
  CHECK(rl::strip_think("<think>plan A</think>\nanswer") == "answer");
  CHECK(rl::strip_think("a<think>x</think>b<think>y</think>c") == "abc");
  CHECK(rl::strip_think("keep<think>unclosed") == "keep");
  CHECK(rl::strip_think("no reasoning") == "no reasoning");
}
