// The trainer end to end on the real cpu environment: a tiny model warmed up on relu's shipped
// solution and its wrong twin (so its rollouts are a mix of right and wrong), a few RL steps per
// switch (rank reward with DCP, compaction with digest and with summary, turns.max 1 vs 3), and
// every stored row checked against values this file computes from the stored verdicts alone:
// first successes, rank rewards, credited advantages, DCP decisions, env calls (saved), segment
// ids, compact records and summaries.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli/environment.hpp"
#include "rl/grader.hpp"
#include "rl/trainer.hpp"
#include "store/database.hpp"
#include "store/statement.hpp"
#include "store/store.hpp"
#include "support.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using namespace leap;

TEST_SUITE_BEGIN("rl");

namespace {

const std::string kStarter = std::string(LEAP_SOURCE_DIR) + "/tasks/starter";

config::EnvConfig fast_env(const std::string& cache) {
  config::EnvConfig e;
  e.workers = 2;
  e.seeds = 2;
  e.cache_dir = cache;
  e.cpu.flags = "-O1 -fPIC -shared";
  e.timing.warmup = 1;
  e.timing.trials = 2;
  e.timing.max_seconds = 0.1;
  e.run_timeout_s = 60;  // a loaded 2-core machine must not turn a correct answer into a timeout
  return e;
}

/// The real cpu environment and its grader, with a compile cache in a temporary folder.
struct CpuEnv {
  test::TempDir dir;
  std::unique_ptr<cli::Environment> env;
  std::unique_ptr<rl::VerifierGrader> grader;
  CpuEnv() {
    env = cli::make_environment(fast_env((dir.path / "cache").string()), "cpu");
    grader = std::make_unique<rl::VerifierGrader>(*env->verifier, 2);
  }
};

CpuEnv& cpu_env() {
  static CpuEnv e;
  return e;
}

/// One task (relu), two groups of 4 per step, answers up to 256 tokens (the solution is 188) at
/// temperature 0.7.
config::Experiment base_experiment(const std::string& model) {
  config::Experiment exp;
  exp.name = "e2e";
  exp.model.path = model;
  exp.model.device = "cpu";
  exp.tasks.dir = kStarter;
  exp.tasks.limit = 1;
  exp.env = fast_env((cpu_env().dir.path / "cache").string());
  exp.rollout.tasks_per_step = 2;
  exp.rollout.group_size = 4;
  exp.rollout.max_new_tokens = 256;
  exp.rollout.temperature = 0.7;
  exp.reward.kind = "rank";
  exp.turns.max = 3;
  exp.compaction.enabled = false;
  exp.train.steps = 2;
  exp.train.mini_batch_size = 8;
  exp.train.eval_every = 0;
  exp.train.checkpoint_every = 0;
  exp.logging.progress = false;
  return exp;
}

rl::TrainSummary train_run(const config::Experiment& exp, store::Store& db, const fs::path& results) {
  rl::TrainContext ctx;
  ctx.store = &db;
  ctx.grader = cpu_env().grader.get();
  ctx.results_dir = results.string();
  ctx.progress = false;
  return rl::train(exp, ctx);
}

/// The tiny model after 100 SFT steps on relu's shipped cpu solution and its one wrong twin
/// (one RL step at lr 1e-12 then writes the checkpoint), built once per process.
const std::string& warm_model() {
  static test::TempDir dir;
  static std::string path;
  if (path.empty()) {
    auto exp = base_experiment((test::tiny_model() / "tiny").string());
    exp.train.sft.enabled = true;
    exp.train.sft.steps = 100;  // loss 7.0 -> 0.007 nats/token: turn 1 is right about a quarter of the time
    exp.train.sft.batch_size = 2;
    exp.train.sft.lr = 3e-3;
    exp.train.sft.mutants = 1;
    exp.optim.lr = 1e-12;
    exp.train.steps = 1;
    exp.rollout.tasks_per_step = 1;
    exp.rollout.group_size = 2;
    exp.rollout.max_new_tokens = 8;
    exp.turns.max = 1;
    store::Store db(dir.path / "leap.db");
    path = train_run(exp, db, dir.path / "results").checkpoint;
    REQUIRE_FALSE(path.empty());
  }
  return path;
}

// ---- the stored rows ---------------------------------------------------------------------

struct TurnRow {
  int turn = 0, segment = 0;
  bool compacted = false;
  std::string verdict, prompt;
  double speedup = NAN;  // NULL: NaN
  int64_t tokens = 0;
  double advantage = 0;
};
struct RolloutRow {
  int index = 0;
  double reward = 0, advantage = 0;
  std::optional<int> first_success;
  std::vector<TurnRow> turns;
};
struct GroupRow {
  int64_t step = 0, index = 0;
  bool activated = false;
  double fail_ratio = 0;
  int recovered = 0;
  std::vector<RolloutRow> rollouts;
};

std::vector<GroupRow> stored_groups(store::Store& db) {
  std::vector<GroupRow> out;
  auto g = db.db().prepare(
      "SELECT id, step, group_index, dcp_activated, fail_ratio_turn1, recovered FROM groups ORDER BY step, group_index");
  while (g.step()) {
    GroupRow gr;
    const int64_t gid = g.column_int64(0);
    gr.step = g.column_int64(1), gr.index = g.column_int64(2), gr.activated = g.column_int64(3) != 0;
    gr.fail_ratio = g.column_double(4), gr.recovered = static_cast<int>(g.column_int64(5));
    auto r = db.db().prepare("SELECT id, rollout_index, reward, advantage, first_success_turn FROM rollouts WHERE group_id = " +
                             std::to_string(gid) + " ORDER BY rollout_index");
    while (r.step()) {
      RolloutRow rr;
      const int64_t rid = r.column_int64(0);
      rr.index = static_cast<int>(r.column_int64(1)), rr.reward = r.column_double(2), rr.advantage = r.column_double(3);
      if (!r.column_is_null(4)) rr.first_success = static_cast<int>(r.column_int64(4));
      auto t = db.db().prepare(
          "SELECT turn_index, segment_index, compacted, verdict, prompt, speedup, completion_tokens, advantage FROM turns "
          "WHERE rollout_id = " + std::to_string(rid) + " ORDER BY turn_index");
      while (t.step()) {
        TurnRow tr;
        tr.turn = static_cast<int>(t.column_int64(0)), tr.segment = static_cast<int>(t.column_int64(1));
        tr.compacted = t.column_int64(2) != 0, tr.verdict = t.column_text(3), tr.prompt = t.column_text(4);
        tr.speedup = t.column_is_null(5) ? NAN : t.column_double(5);
        tr.tokens = t.column_int64(6), tr.advantage = t.column_double(7);
        rr.turns.push_back(std::move(tr));
      }
      gr.rollouts.push_back(std::move(rr));
    }
    out.push_back(std::move(gr));
  }
  return out;
}

double metric(store::Store& db, const std::string& name, int64_t step) {
  auto st = db.db().prepare("SELECT value FROM metrics WHERE name = '" + name + "' AND step = " + std::to_string(step));
  REQUIRE(st.step());
  return st.column_double(0);
}

// ---- what the rows must say, computed here from the verdicts -------------------------------

std::optional<int> first_success(const RolloutRow& r) {
  for (const auto& t : r.turns)
    if (t.verdict == "correct") return t.turn;
  return std::nullopt;
}

/// LEAP's tournament (DESIGN.md section 4) with keys speedup (at the first success, 5 % relative
/// margin) and, when `tokens_key`, generated tokens (margin 16): (wins - losses) / (G - 1).
std::vector<double> rank_rewards(const GroupRow& g, bool tokens_key) {
  const size_t G = g.rollouts.size();
  auto beats = [&](const RolloutRow& a, const RolloutRow& b) -> int {
    const auto ka = first_success(a), kb = first_success(b);
    if (!ka && !kb) return 0;
    if (!ka || !kb) return ka ? 1 : -1;
    if (*ka != *kb) return *ka < *kb ? 1 : -1;
    const double sa = a.turns[static_cast<size_t>(*ka - 1)].speedup, sb = b.turns[static_cast<size_t>(*kb - 1)].speedup;
    if (!std::isnan(sa) && !std::isnan(sb) && std::abs(sa - sb) > 0.05 * std::max(sa, sb)) return sa > sb ? 1 : -1;
    if (!tokens_key) return 0;
    int64_t na = 0, nb = 0;
    for (const auto& t : a.turns) na += t.tokens;
    for (const auto& t : b.turns) nb += t.tokens;
    if (std::llabs(na - nb) > 16) return na < nb ? 1 : -1;
    return 0;
  };
  std::vector<double> out(G, 0.0);
  for (size_t i = 0; i < G; ++i)
    for (size_t j = 0; j < G; ++j)
      if (i != j) out[i] += beats(g.rollouts[i], g.rollouts[j]);
  for (auto& v : out) v /= static_cast<double>(G - 1);
  return out;
}

/// Checks every group of the run against `exp`'s rules; returns how many rollouts had a correct
/// turn 1 and how many failed turn 1 (so a caller can require a mixed run).
std::pair<int, int> check_rows(store::Store& db, const config::Experiment& exp, bool tokens_key) {
  const int T = static_cast<int>(exp.turns.max);
  const int G = static_cast<int>(exp.rollout.group_size);
  int ok1 = 0, failed1 = 0;
  std::map<int64_t, int64_t> env_calls, env_calls_saved, compactions;
  const auto groups = stored_groups(db);
  REQUIRE(groups.size() == static_cast<size_t>(exp.train.steps * exp.rollout.tasks_per_step));
  for (const auto& g : groups) {
    CAPTURE(g.step);
    CAPTURE(g.index);
    REQUIRE(g.rollouts.size() == static_cast<size_t>(G));
    // DCP from the turn-1 verdicts: f = failed / G, expanded iff min <= f <= max, and only when
    // there is a later turn to give (turns.max > 1).
    int failed = 0, recovered = 0;
    for (const auto& r : g.rollouts) failed += r.turns.at(0).verdict != "correct" ? 1 : 0;
    const double f = static_cast<double>(failed) / G;
    const bool expand = T > 1 && (exp.dcp.enabled ? f >= exp.dcp.min_fail_ratio - 1e-12 && f <= exp.dcp.max_fail_ratio + 1e-12
                                                  : failed > 0);
    CHECK(g.activated == expand);
    CHECK(g.fail_ratio == doctest::Approx(f));
    if (!expand && T > 1) env_calls_saved[g.step] += failed * (T - 1);
    ok1 += G - failed, failed1 += failed;
    const auto rank = rank_rewards(g, tokens_key);
    for (const auto& r : g.rollouts) {
      CAPTURE(r.index);
      const auto k = first_success(r);
      CHECK(r.first_success == k);
      // Turns taken: one if the group was pruned; else up to the first success or T.
      const size_t turns = !expand ? 1 : static_cast<size_t>(k ? *k : T);
      CHECK(r.turns.size() == turns);
      env_calls[g.step] += static_cast<int64_t>(r.turns.size());
      recovered += r.turns.at(0).verdict != "correct" && k && *k > 1 ? 1 : 0;
      // The rank reward is the advantage; turn credit gamma^(k - t) A for A > 0 up to k.
      CHECK(r.reward == doctest::Approx(rank[static_cast<size_t>(r.index)]).epsilon(1e-9));
      CHECK(r.advantage == doctest::Approx(r.reward).epsilon(1e-9));
      for (const auto& t : r.turns) {
        CAPTURE(t.turn);
        const double want = r.advantage > 0 && k ? std::pow(exp.turns.gamma, *k - t.turn) * r.advantage : r.advantage;
        CHECK(t.advantage == doctest::Approx(want).epsilon(1e-9));
        // Segments: a compact record starts the next one; without compaction a rollout is one.
        int segment = 0;
        for (const auto& u : r.turns)
          if (u.turn <= t.turn && u.compacted) ++segment;
        CHECK(t.segment == segment);
        if (t.compacted) ++compactions[g.step];
        if (!exp.compaction.enabled || t.turn == 1) CHECK_FALSE(t.compacted);
      }
    }
    CHECK(g.recovered == recovered);
  }
  for (int64_t step = 1; step <= exp.train.steps; ++step) {
    CAPTURE(step);
    CHECK(metric(db, "env_calls", step) == static_cast<double>(env_calls[step]));
    CHECK(metric(db, "env_calls_saved", step) == static_cast<double>(env_calls_saved[step]));
    CHECK(metric(db, "compaction_events", step) == static_cast<double>(compactions[step]));
  }
  return {ok1, failed1};
}

/// Compaction with a 16-token budget: every later turn's prompt is a compact record. Digest: it
/// lists the stored verdict of every attempt before the latest and shows the latest one once; summary: it carries
/// the summary that the `compaction_summary` event of that turn holds.
void check_compact_records(store::Store& db, const std::string& strategy) {
  int compacted = 0;
  std::vector<std::string> events;
  auto ev = db.db().prepare("SELECT message FROM events WHERE kind = 'compaction_summary' ORDER BY id");
  while (ev.step()) events.push_back(ev.column_text(0));
  for (const auto& g : stored_groups(db))
    for (const auto& r : g.rollouts)
      for (const auto& t : r.turns) {
        CAPTURE(t.turn);
        CHECK(t.compacted == (t.turn > 1));  // the budget is below any context
        if (!t.compacted) continue;
        ++compacted;
        if (strategy == "digest") {
          // A verdict line per attempt before the latest; the latest (t.turn - 1) only as code and result.
          for (const auto& u : r.turns) {
            const bool listed = t.prompt.find("attempt " + std::to_string(u.turn) + ": " + u.verdict) != std::string::npos;
            if (u.turn < t.turn - 1) CHECK(listed);
            if (u.turn == t.turn - 1) {
              CHECK_FALSE(listed);
              CHECK(t.prompt.find("Result: " + u.verdict) != std::string::npos);
            }
          }
          CHECK(t.prompt.find("Your latest attempt (attempt " + std::to_string(t.turn - 1) + ")") != std::string::npos);
          CHECK(t.prompt.find("Summary of your earlier attempts") == std::string::npos);
        } else {
          CHECK(t.prompt.find("Summary of your earlier attempts:") != std::string::npos);
          const std::string head = "group " + std::to_string(g.index) + " rollout " + std::to_string(r.index) +
                                   " before turn " + std::to_string(t.turn) + " (segment " + std::to_string(t.segment) + "): ";
          bool found = false;
          for (const auto& e : events) found = found || e.rfind(head, 0) == 0;
          CHECK_MESSAGE(found, head);
        }
      }
  CHECK(compacted > 0);
  // Summary events are per step; each compacted turn has exactly one.
  if (strategy == "summary") CHECK(events.size() == static_cast<size_t>(compacted));
  else CHECK(events.empty());
}

}  // namespace

TEST_CASE("rl trainer end to end on the cpu environment: rank + DCP, turns 1 vs 3, compaction digest and summary") {
  const std::string& model = warm_model();
  test::TempDir out;

  SUBCASE("rank reward with DCP, turns.max 3 against turns.max 1") {
    auto exp = base_experiment(model);
    store::Store db3(out.path / "t3.db");
    train_run(exp, db3, out.path / "r3");
    const auto [ok1, failed1] = check_rows(db3, exp, true);
    MESSAGE("turns 3: " << ok1 << " rollouts correct at turn 1, " << failed1 << " failed");
    CHECK(ok1 > 0);
    CHECK(failed1 > 0);

    auto exp1 = exp;
    exp1.turns.max = 1;
    store::Store db1(out.path / "t1.db");
    train_run(exp1, db1, out.path / "r1");
    check_rows(db1, exp1, true);
    // Step 1 starts from the same weights with the same seeds: the same turn-1 verdicts. With
    // one turn every rollout has one turn and nothing is saved.
    const auto g3 = stored_groups(db3), g1 = stored_groups(db1);
    for (size_t g = 0; g < 2; ++g)
      for (size_t i = 0; i < g1[g].rollouts.size(); ++i) {
        CHECK(g1[g].rollouts[i].turns.size() == 1);
        CHECK(g1[g].rollouts[i].turns[0].verdict == g3[g].rollouts[i].turns[0].verdict);
      }
    CHECK(metric(db1, "env_calls", 1) == 8);
    CHECK(metric(db1, "env_calls_saved", 1) == 0);
  }

  SUBCASE("compaction with digest") {
    auto exp = base_experiment(model);
    exp.dcp.enabled = false;  // every failure is debugged, so later turns exist
    exp.compaction.enabled = true;
    exp.compaction.max_prompt_tokens = 16;
    exp.compaction.strategy = "digest";
    store::Store db(out.path / "digest.db");
    train_run(exp, db, out.path / "rd");
    check_rows(db, exp, true);
    check_compact_records(db, "digest");
  }

  SUBCASE("compaction with summary") {
    auto exp = base_experiment(model);
    exp.dcp.enabled = false;
    exp.compaction.enabled = true;
    exp.compaction.max_prompt_tokens = 16;
    exp.compaction.strategy = "summary";
    exp.compaction.summary_max_tokens = 8;
    exp.reward.rank_keys = {"speedup"};  // summary tokens count in the tokens key but are not stored per turn
    store::Store db(out.path / "summary.db");
    train_run(exp, db, out.path / "rs");
    check_rows(db, exp, false);
    check_compact_records(db, "summary");
  }
}
