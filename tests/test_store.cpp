// Tests of the SQLite store layer (src/store/).
#include <doctest/doctest.h>
#include <sqlite3.h>
#include <ftw.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "util/bench_metrics.hpp"
#include "report/store_input.hpp"
#include "store/database.hpp"
#include "store/migrations.hpp"
#include "store/run_id.hpp"
#include "store/statement.hpp"
#include "store/store.hpp"
#include "store/transaction.hpp"
#include "util/error.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using namespace leap::store;

namespace {

/// A fresh directory under /tmp, removed with everything in it at scope exit.
/// Uses mkdtemp/nftw rather than std::filesystem::remove_all: libtorch.so exports its own
/// std::filesystem symbols, which interpose libstdc++'s, and its remove_all crashes.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = "/tmp/leap_store_test_XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    ::nftw(
        path.c_str(),
        [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  fs::path file(const std::string& name = "leap.db") const { return path / name; }
};

std::int64_t scalar_int(Database& db, const std::string& sql) {
  Statement st = db.prepare(sql);
  REQUIRE(st.step());
  return st.column_int64(0);
}

std::string scalar_text(Database& db, const std::string& sql) {
  Statement st = db.prepare(sql);
  REQUIRE(st.step());
  return st.column_text(0);
}

RunInfo sample_run(const std::string& name = "exp") {
  RunInfo r;
  r.name = name;
  r.kind = RunKind::train;
  r.config_yaml = "name: " + name + "\nturns: {max: 2}\n";
  r.config_hash = "cfg" + name;
  r.seed = 42;
  r.git_commit = "abc123def456";
  r.hostname = "testhost";
  r.started_at = 1795966200.0;
  return r;
}

TaskInfo task(int i) {
  return TaskInfo{"unit", "task" + std::to_string(i), i % 3 + 1, std::string("reduction"),
                  "hash" + std::to_string(i)};
}

constexpr int kGroups = 2, kRollouts = 3, kTurns = 2;

/// A step with kGroups groups x kRollouts rollouts x kTurns turns and deterministic values:
/// rollout 0 succeeds at turn 1, rollout 1 at turn 2, the others never.
StepRecord make_step(const std::string& run_id, std::int64_t step) {
  StepRecord s;
  s.run_id = run_id;
  s.step = step;
  s.started_at = 1795966200.0 + 10.0 * step;
  s.ended_at = s.started_at + 9.5;
  s.generation_seconds = 4.0;
  s.env_seconds = 3.0 + 0.01 * step;
  s.update_seconds = 2.5;
  for (int g = 0; g < kGroups; ++g) {
    GroupRecord gr;
    gr.task = task(g);
    gr.group_index = g;
    gr.dcp_activated = (g == 0);
    gr.fail_ratio_turn1 = 2.0 / 3.0;
    gr.recovered = 1;
    for (int r = 0; r < kRollouts; ++r) {
      RolloutRecord ro;
      ro.rollout_index = r;
      if (r < 2) ro.first_success_turn = r + 1;
      ro.final_verdict = r < 2 ? "correct" : "wrong_output";
      ro.reward = r == 0 ? 1.0 : (r == 1 ? 0.0 : -1.0);
      ro.advantage = ro.reward;
      ro.reward_rank = ro.reward;
      ro.reward_binary = r < 2 ? 1.0 : 0.0;
      for (int t = 1; t <= kTurns; ++t) {
        TurnRecord tr;
        tr.turn_index = t;
        tr.node_index = t - 1;
        if (t > 1) tr.parent_index = t - 2;
        tr.segment_index = 0;
        tr.prompt = "prompt g" + std::to_string(g) + " r" + std::to_string(r) + " t" +
                    std::to_string(t);
        tr.completion = "```cuda\n__global__ void k() {}\n```";
        tr.prompt_tokens = 100 * t;
        tr.completion_tokens = 50 + r;
        const bool correct = (r == 0) || (r == 1 && t == 2);
        tr.verdict = correct ? "correct" : (t == 1 ? "compile_error" : "wrong_output");
        tr.feedback = correct ? "" : "error: something";
        if (correct) {
          tr.candidate_ms = 0.5 + 0.1 * g;
          tr.reference_ms = 1.0;
          tr.speedup = *tr.reference_ms / *tr.candidate_ms;
        }
        tr.reward = correct ? 1.0 : 0.0;
        tr.discounted_return = tr.reward;
        tr.advantage = ro.reward;
        tr.old_logprob_mean = -0.25;
        tr.env_seconds = 0.1 * (g + 1) + 0.01 * r + 0.001 * t;
        tr.compacted = (t == 2 && r == 2);
        ro.turns.push_back(tr);
      }
      gr.rollouts.push_back(ro);
    }
    s.groups.push_back(gr);
  }
  s.metrics.push_back({"reward_mean", 0.5 + step, 1795966200.0 + 10.0 * step + 9.0});
  s.metrics.push_back({"loss", std::numeric_limits<double>::quiet_NaN(), std::nullopt});
  s.events.push_back({"note", "step " + std::to_string(step) + " done", std::nullopt});
  return s;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  REQUIRE_MESSAGE(in.good(), "cannot read " << p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// The bodies of the ```sql fenced blocks of a markdown text.
std::vector<std::string> sql_blocks(const std::string& md) {
  std::vector<std::string> out;
  std::istringstream in(md);
  std::string line, cur;
  bool inside = false;
  while (std::getline(in, line)) {
    if (!inside && line.rfind("```sql", 0) == 0) {
      inside = true;
      cur.clear();
    } else if (inside && line.rfind("```", 0) == 0) {
      inside = false;
      out.push_back(cur);
    } else if (inside) {
      cur += line + "\n";
    }
  }
  return out;
}

}  // namespace

// Run with: leap_tests -ts='store*'
TEST_SUITE_BEGIN("store");

TEST_CASE("store: migration from empty to v1 creates every table") {
  TempDir tmp;
  const fs::path path = tmp.path / "nested" / "dir" / "leap.db";
  Store store(path);
  CHECK(fs::exists(path));
  Database& db = store.db();
  CHECK(db.user_version() == kSchemaVersion);
  CHECK(kSchemaVersion == 4);
  CHECK(scalar_int(db, "PRAGMA application_id") == kApplicationId);
  CHECK(scalar_text(db, "PRAGMA journal_mode") == "wal");
  CHECK(scalar_int(db, "PRAGMA foreign_keys") == 1);
  std::set<std::string> tables;
  Statement st = db.prepare("SELECT name FROM sqlite_schema WHERE type = 'table'");
  while (st.step()) tables.insert(st.column_text(0));
  CHECK(tables.size() == Store::table_names().size());
  for (const auto& t : Store::table_names()) {
    CHECK_MESSAGE(tables.count(t) == 1, "missing table " << t);
    CHECK(store.count_rows(t) == 0);
  }
  for (const char* idx : {"idx_runs_started", "idx_metrics_run_name_step", "idx_groups_task",
                          "idx_turns_verdict", "idx_events_run_time"}) {
    CHECK_MESSAGE(scalar_int(db, std::string("SELECT count(*) FROM sqlite_schema WHERE type = "
                                             "'index' AND name = '") + idx + "'") == 1,
                  "missing index " << idx);
  }
  CHECK_THROWS_AS(store.count_rows("sqlite_schema"), leap::StoreError);
}

TEST_CASE("store: reopening is idempotent") {
  TempDir tmp;
  std::string id;
  {
    Store store(tmp.file());
    id = store.create_run(sample_run());
    store.write_step(make_step(id, 1));
  }
  for (int i = 0; i < 2; ++i) {
    Store store(tmp.file());
    CHECK(store.db().user_version() == kSchemaVersion);
    CHECK(store.count_rows("runs") == 1);
    CHECK(store.count_rows("turns") == kGroups * kRollouts * kTurns);
    CHECK(store.last_completed_step(id) == 1);
    migrate(store.db(), migrations());  // already current: no-op
    CHECK(store.db().user_version() == kSchemaVersion);
  }
}

TEST_CASE("store: migration steps apply in order, each in its own transaction") {
  TempDir tmp;
  // Two more steps after this binary's own (v = kSchemaVersion): v + 1 works, v + 2 fails.
  const int v = kSchemaVersion;
  std::vector<Migration> steps = migrations();
  steps.push_back({v + 1, "add runs.note", "ALTER TABLE runs ADD COLUMN note TEXT"});
  {
    Database db(tmp.file(), OpenOptions{.migrate = false});
    CHECK(db.user_version() == 0);
    migrate(db, steps);
    CHECK(db.user_version() == v + 1);
    CHECK(scalar_int(db, "SELECT count(*) FROM pragma_table_info('runs') WHERE name = 'note'") ==
          1);

    steps.push_back({v + 2, "broken", "CREATE TABLE extra (a INTEGER); INSERT INTO nope VALUES (1)"});
    try {
      migrate(db, steps);
      FAIL("a failing migration must throw");
    } catch (const leap::StoreError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(tmp.file().string()) != std::string::npos);
      CHECK(msg.find("schema version " + std::to_string(v + 2)) != std::string::npos);
    }
    CHECK(db.user_version() == v + 1);  // the failed step left the previous version
    CHECK(scalar_int(db, "SELECT count(*) FROM sqlite_schema WHERE name = 'extra'") == 0);
    CHECK_FALSE(db.in_transaction());

    std::vector<Migration> gap = {migrations()[0], {3, "skips 2", "SELECT 1"}};
    CHECK_THROWS_AS(migrate(db, gap), leap::StoreError);
  }
  // The file is now at version v + 1, newer than this binary's v.
  CHECK_THROWS_AS(Store(tmp.file()), leap::StoreError);
}

TEST_CASE("store: a v1 database is upgraded to v2 (eval_results.suspicious) and v3 (run lease) with its rows kept") {
  TempDir tmp;
  {
    Database db(tmp.file(), OpenOptions{.migrate = false});
    migrate(db, {migrations()[0]});
    REQUIRE(db.user_version() == 1);
    db.exec("PRAGMA foreign_keys = ON");
    db.exec("INSERT INTO evaluations (bench, created_at) VALUES ('old', 1.0)");
    db.exec("INSERT INTO tasks (task_set, name, hash) VALUES ('s', 't', 'h')");
    db.exec("INSERT INTO eval_results (evaluation_id, task_id, sample, turn, verdict) VALUES (1, 1, 0, 1, 'correct')");
    // `leap report` reads an unmigrated v1 store (it opens stores read-only): no suspicious column.
    const auto in = leap::report::eval_input(db, 1);
    REQUIRE(in.attempts.size() == 1);
    CHECK(in.attempts[0].verdict == "correct");
    CHECK_FALSE(in.attempts[0].suspicious);
  }
  Store store(tmp.file());
  CHECK(store.db().user_version() == 4);
  CHECK(store.count_rows("eval_results") == 1);
  CHECK(scalar_int(store.db(), "SELECT suspicious FROM eval_results") == 0);
  CHECK_THROWS_AS(store.db().exec("UPDATE eval_results SET suspicious = 2"), leap::StoreError);
}

TEST_CASE("store: a v3 database's turns become chain nodes of v4 (node_index, parent_index), rows kept") {
  TempDir tmp;
  {
    Database db(tmp.file(), OpenOptions{.migrate = false});
    migrate(db, {migrations()[0], migrations()[1], migrations()[2]});
    REQUIRE(db.user_version() == 3);
    db.exec("INSERT INTO runs (id, name, kind, config_yaml, config_hash, seed, git_commit, hostname, started_at) "
            "VALUES ('r', 'n', 'train', '{}', 'h', 1, 'g', 'host', 1.0)");
    db.exec("INSERT INTO tasks (task_set, name, hash) VALUES ('s', 't', 'h')");
    db.exec("INSERT INTO steps (run_id, step, started_at, ended_at, generation_seconds, env_seconds, update_seconds) "
            "VALUES ('r', 1, 1.0, 2.0, 0, 0, 0)");
    db.exec("INSERT INTO groups (run_id, step, task_id, group_index, dcp_activated, fail_ratio_turn1, recovered) "
            "VALUES ('r', 1, 1, 0, 1, 0.5, 0)");
    db.exec("INSERT INTO rollouts (group_id, rollout_index, final_verdict, reward) VALUES (1, 0, 'correct', 1.0)");
    for (int t = 1; t <= 3; ++t)
      db.exec("INSERT INTO turns (rollout_id, turn_index, segment_index, prompt, completion, prompt_tokens, "
              "completion_tokens, verdict, feedback, reward, discounted_return, advantage, env_seconds, compacted) "
              "VALUES (1, " + std::to_string(t) + ", 0, 'p', 'c', 1, 1, 'wrong_output', 'f', 0, 0, " +
              std::to_string(t) + ".5, 0.1, 0)");
  }
  Store store(tmp.file());
  CHECK(store.db().user_version() == 4);
  Statement q = store.db().prepare("SELECT turn_index, node_index, parent_index, advantage FROM turns ORDER BY id");
  for (int t = 1; t <= 3; ++t) {
    REQUIRE(q.step());
    CHECK(q.column_int64(0) == t);
    CHECK(q.column_int64(1) == t - 1);
    CHECK(q.column_opt_int64(2) == (t == 1 ? std::nullopt : std::optional<std::int64_t>(t - 2)));
    CHECK(q.column_double(3) == doctest::Approx(t + 0.5));
  }
  CHECK_FALSE(q.step());
  // Several nodes may now share a turn, but not a node index; a parent must be an earlier node.
  const std::string row = "INSERT INTO turns (rollout_id, turn_index, node_index, parent_index, segment_index, prompt, "
                          "completion, prompt_tokens, completion_tokens, verdict, feedback, reward, discounted_return, "
                          "advantage, env_seconds, compacted) VALUES (1, 2, ";
  store.db().exec(row + "3, 0, 0, 'p', 'c', 1, 1, 'correct', 'f', 1, 1, 0, 0.1, 0)");
  CHECK_THROWS_AS(store.db().exec(row + "3, 0, 0, 'p', 'c', 1, 1, 'correct', 'f', 1, 1, 0, 0.1, 0)"), leap::StoreError);
  CHECK_THROWS_AS(store.db().exec(row + "4, 4, 0, 'p', 'c', 1, 1, 'correct', 'f', 1, 1, 0, 0.1, 0)"), leap::StoreError);
  CHECK(scalar_int(store.db(), "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name = 'idx_turns_verdict'") == 1);
}

TEST_CASE("store: a database with a newer schema version is refused and left untouched") {
  TempDir tmp;
  { Store store(tmp.file()); store.db().exec("PRAGMA user_version = 7"); }
  try {
    Store store(tmp.file());
    FAIL("opening a newer database must throw");
  } catch (const leap::StoreError& e) {
    const std::string msg = e.what();
    CHECK(msg.find(tmp.file().string()) != std::string::npos);
    CHECK(msg.find("schema version 7") != std::string::npos);
    CHECK(msg.find("newer") != std::string::npos);
  }
  CHECK_THROWS_AS(Database(tmp.file(), OpenOptions{.migrate = false}), leap::StoreError);
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(tmp.file().c_str(), &raw) == SQLITE_OK);
  sqlite3_stmt* st = nullptr;
  REQUIRE(sqlite3_prepare_v2(raw, "PRAGMA user_version", -1, &st, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(st) == SQLITE_ROW);
  CHECK(sqlite3_column_int(st, 0) == 7);
  sqlite3_finalize(st);
  sqlite3_close(raw);
}

TEST_CASE("store: a foreign SQLite file is refused") {
  TempDir tmp;
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(tmp.file().c_str(), &raw) == SQLITE_OK);
  REQUIRE(sqlite3_exec(raw, "CREATE TABLE other (x INTEGER)", nullptr, nullptr, nullptr) ==
          SQLITE_OK);
  sqlite3_close(raw);
  try {
    Store store(tmp.file());
    FAIL("a foreign file must be refused");
  } catch (const leap::StoreError& e) {
    CHECK(std::string(e.what()).find("not a leap database") != std::string::npos);
  }
}

TEST_CASE("store: run ids and run lifecycle") {
  CHECK(make_run_id(1795966200.0, 0xab12) == "20261129-153000-ab12");
  CHECK(make_run_id(1795966200.9, 0x1ab12) == "20261129-153000-ab12");
  CHECK(is_run_id("20261129-153000-ab12"));
  CHECK_FALSE(is_run_id("20261129-153000-AB12"));
  CHECK_FALSE(is_run_id("2026112-153000-ab12"));

  TempDir tmp;
  Store store(tmp.file());
  const std::string a = store.create_run(sample_run("a"));
  const std::string b = store.create_run(sample_run("b"));  // same start second
  CHECK(is_run_id(a));
  CHECK(a.rfind("20261129-153000-", 0) == 0);
  CHECK(a != b);
  RunInfo fixed = sample_run("fixed");
  fixed.id = "my-run";
  fixed.started_at = 1795966300.0;
  fixed.kind = RunKind::eval;
  CHECK(store.create_run(fixed) == "my-run");
  CHECK_THROWS_AS(store.create_run(fixed), leap::StoreError);

  auto runs = store.list_runs();
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].id == "my-run");  // newest first
  CHECK(runs[0].kind == RunKind::eval);
  auto ra = store.get_run(a);
  REQUIRE(ra);
  CHECK(ra->name == "a");
  CHECK(ra->status == RunStatus::running);
  CHECK(ra->config_yaml == "name: a\nturns: {max: 2}\n");
  CHECK(ra->config_hash == "cfga");
  CHECK(ra->seed == 42);
  CHECK(ra->git_commit == "abc123def456");
  CHECK(ra->hostname == "testhost");
  CHECK(ra->started_at == doctest::Approx(1795966200.0));
  CHECK_FALSE(ra->ended_at);

  store.finish_run(a, RunStatus::finished, 1795967000.0);
  store.finish_run(b, RunStatus::interrupted);
  CHECK(store.get_run(a)->status == RunStatus::finished);
  CHECK(store.get_run(a)->ended_at == doctest::Approx(1795967000.0));
  CHECK(store.get_run(b)->status == RunStatus::interrupted);
  CHECK(store.get_run(b)->ended_at.value_or(0) > 1.7e9);
  CHECK_FALSE(store.get_run("nope"));
  CHECK_THROWS_AS(store.finish_run("nope", RunStatus::failed), leap::StoreError);
}

TEST_CASE("store: write_step round trip") {
  TempDir tmp;
  Store store(tmp.file());
  const std::string id = store.create_run(sample_run());
  CHECK_FALSE(store.last_completed_step(id));
  store.write_step(make_step(id, 1));
  store.write_step(make_step(id, 2));

  auto counts = store.row_counts();
  CHECK(counts["runs"] == 1);
  CHECK(counts["steps"] == 2);
  CHECK(counts["tasks"] == kGroups);  // the same tasks in both steps: deduplicated
  CHECK(counts["groups"] == 2 * kGroups);
  CHECK(counts["rollouts"] == 2 * kGroups * kRollouts);
  CHECK(counts["turns"] == 2 * kGroups * kRollouts * kTurns);
  CHECK(counts["metrics"] == 4);
  CHECK(counts["events"] == 2);
  CHECK(store.last_completed_step(id) == 2);

  Database& db = store.db();
  Statement step = db.prepare(
      "SELECT started_at, ended_at, generation_seconds, env_seconds, update_seconds FROM steps "
      "WHERE run_id = ?1 AND step = 2");
  step.bind_text(1, id);
  REQUIRE(step.step());
  CHECK(step.column_double(0) == doctest::Approx(1795966220.0));
  CHECK(step.column_double(1) == doctest::Approx(1795966229.5));
  CHECK(step.column_double(2) == doctest::Approx(4.0));
  CHECK(step.column_double(3) == doctest::Approx(3.02));
  CHECK(step.column_double(4) == doctest::Approx(2.5));

  Statement g = db.prepare(
      "SELECT tk.name, tk.level, tk.category, g.dcp_activated, g.fail_ratio_turn1, g.recovered "
      "FROM groups g JOIN tasks tk ON tk.id = g.task_id WHERE g.step = 2 ORDER BY group_index");
  REQUIRE(g.step());
  CHECK(g.column_text(0) == "task0");
  CHECK(g.column_int64(1) == 1);
  CHECK(g.column_text(2) == "reduction");
  CHECK(g.column_int64(3) == 1);
  CHECK(g.column_double(4) == doctest::Approx(2.0 / 3.0));
  CHECK(g.column_int64(5) == 1);
  REQUIRE(g.step());
  CHECK(g.column_text(0) == "task1");
  CHECK(g.column_int64(3) == 0);

  Statement ro = db.prepare(
      "SELECT r.final_verdict, r.first_success_turn, r.reward, r.advantage, r.reward_rank, "
      "r.reward_binary, r.reward_speedup, r.reward_kernelgym FROM rollouts r "
      "JOIN groups g ON g.id = r.group_id WHERE g.step = 1 AND g.group_index = 1 "
      "ORDER BY r.rollout_index");
  REQUIRE(ro.step());  // rollout 0
  CHECK(ro.column_text(0) == "correct");
  CHECK(ro.column_opt_int64(1) == 1);
  CHECK(ro.column_double(2) == doctest::Approx(1.0));
  CHECK(ro.column_double(5) == doctest::Approx(1.0));
  CHECK(ro.column_is_null(6));
  CHECK(ro.column_is_null(7));
  REQUIRE(ro.step());  // rollout 1
  CHECK(ro.column_opt_int64(1) == 2);
  REQUIRE(ro.step());  // rollout 2: never correct
  CHECK(ro.column_text(0) == "wrong_output");
  CHECK_FALSE(ro.column_opt_int64(1));
  CHECK(ro.column_double(3) == doctest::Approx(-1.0));
  CHECK(ro.column_double(4) == doctest::Approx(-1.0));
  CHECK(ro.column_double(5) == doctest::Approx(0.0));
  CHECK_FALSE(ro.step());

  Statement t = db.prepare(
      "SELECT t.turn_index, t.segment_index, t.prompt, t.completion, t.prompt_tokens, "
      "t.completion_tokens, t.verdict, t.feedback, t.candidate_ms, t.reference_ms, t.speedup, "
      "t.suspicious, t.reward, t.discounted_return, t.advantage, t.old_logprob_mean, "
      "t.new_logprob_mean, t.env_seconds, t.compacted FROM turns t "
      "JOIN rollouts r ON r.id = t.rollout_id JOIN groups g ON g.id = r.group_id "
      "WHERE g.step = 2 AND g.group_index = 1 AND r.rollout_index = 1 ORDER BY t.turn_index");
  REQUIRE(t.step());  // turn 1 failed
  CHECK(t.column_int64(0) == 1);
  CHECK(t.column_text(2) == "prompt g1 r1 t1");
  CHECK(t.column_text(6) == "compile_error");
  CHECK(t.column_text(7) == "error: something");
  CHECK(t.column_is_null(8));
  CHECK(t.column_is_null(10));
  REQUIRE(t.step());  // turn 2 correct
  CHECK(t.column_int64(0) == 2);
  CHECK(t.column_int64(1) == 0);
  CHECK(t.column_text(3) == "```cuda\n__global__ void k() {}\n```");
  CHECK(t.column_int64(4) == 200);
  CHECK(t.column_int64(5) == 51);
  CHECK(t.column_text(6) == "correct");
  CHECK(t.column_double(8) == doctest::Approx(0.6));
  CHECK(t.column_double(9) == doctest::Approx(1.0));
  CHECK(t.column_double(10) == doctest::Approx(1.0 / 0.6));
  CHECK(t.column_int64(11) == 0);
  CHECK(t.column_double(12) == doctest::Approx(1.0));
  CHECK(t.column_double(14) == doctest::Approx(0.0));
  CHECK(t.column_double(15) == doctest::Approx(-0.25));
  CHECK(t.column_is_null(16));
  CHECK(t.column_double(17) == doctest::Approx(0.212));
  CHECK(t.column_int64(18) == 0);
  CHECK_FALSE(t.step());
  CHECK(scalar_int(db, "SELECT count(*) FROM turns WHERE compacted = 1") == 2 * kGroups);

  auto reward = store.metric_series(id, "reward_mean");
  REQUIRE(reward.size() == 2);
  CHECK(reward[0].step == 1);
  CHECK(reward[0].value == doctest::Approx(1.5));
  CHECK(reward[0].wall_time == doctest::Approx(1795966219.0));
  CHECK(reward[1].step == 2);
  CHECK(reward[1].value == doctest::Approx(2.5));
  auto loss = store.metric_series(id, "loss");
  REQUIRE(loss.size() == 2);
  CHECK(std::isnan(loss[0].value));  // NaN is stored as NULL and read back as NaN
  CHECK(store.metric_series(id, "nope").empty());
  CHECK(scalar_text(db, "SELECT message FROM events WHERE step = 2") == "step 2 done");
}

TEST_CASE("store: a failed write_step leaves no partial rows") {
  TempDir tmp;
  Store store(tmp.file());
  const std::string id = store.create_run(sample_run());
  store.write_step(make_step(id, 1));
  const auto before = store.row_counts();

  SUBCASE("duplicate turn in the last rollout") {
    StepRecord bad = make_step(id, 2);
    bad.groups.push_back(bad.groups.back());
    bad.groups.back().group_index = 7;
    bad.groups.back().task = task(9);  // a new task: its insert must be rolled back too
    bad.groups.back().rollouts.back().turns.back().node_index = 0;  // collides with turn 1's node
    bad.groups.back().rollouts.back().turns.back().parent_index.reset();
    try {
      store.write_step(bad);
      FAIL("write_step must throw");
    } catch (const leap::StoreError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(tmp.file().string()) != std::string::npos);
      CHECK(msg.find("step 2") != std::string::npos);
      CHECK(msg.find("UNIQUE") != std::string::npos);
    }
  }
  SUBCASE("NaN reward in a NOT NULL column") {
    StepRecord bad = make_step(id, 2);
    bad.groups[1].rollouts[2].turns[1].advantage = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_AS(store.write_step(bad), leap::StoreError);
  }
  SUBCASE("the same step twice") {
    CHECK_THROWS_AS(store.write_step(make_step(id, 1)), leap::StoreError);
  }
  SUBCASE("unknown run") {
    CHECK_THROWS_AS(store.write_step(make_step("no-such-run", 2)), leap::StoreError);
  }
  CHECK(store.row_counts() == before);
  CHECK(store.last_completed_step(id) == 1);
  CHECK_FALSE(store.db().in_transaction());
  store.write_step(make_step(id, 2));  // the store is still usable
  CHECK(store.last_completed_step(id) == 2);
}

TEST_CASE("store: Transaction rolls back unless committed") {
  TempDir tmp;
  Store store(tmp.file());
  const std::string id = store.create_run(sample_run());
  {
    Transaction tx(store.db());
    store.add_metric(id, 1, "x", 1.0);
    CHECK(store.count_rows("metrics") == 1);
    CHECK_THROWS_AS(Transaction(store.db()), leap::StoreError);  // not nestable
  }
  CHECK(store.count_rows("metrics") == 0);
  {
    Transaction tx(store.db());
    store.add_metric(id, 1, "x", 2.0);
    tx.commit();
    CHECK_THROWS_AS(tx.commit(), leap::StoreError);
  }
  REQUIRE(store.metric_series(id, "x").size() == 1);
  CHECK(store.metric_series(id, "x")[0].value == doctest::Approx(2.0));
}

TEST_CASE("store: Statement binds and reads every type") {
  Database db(":memory:");
  db.exec("CREATE TABLE t (i INTEGER, d REAL, s TEXT, n TEXT, b BLOB)");
  Statement ins = db.prepare("INSERT INTO t VALUES (?1, ?2, ?3, ?4, ?5)");
  const std::uint8_t bytes[] = {0, 1, 2, 255};
  const std::string with_nul("a\0b", 3);
  ins.bind_int64(1, -(std::int64_t{1} << 40)).bind_double(2, 2.5).bind_text(3, with_nul);
  ins.bind_null(4).bind_blob(5, bytes, sizeof bytes);
  ins.run();
  Statement sel = db.prepare("SELECT i, d, s, n, b FROM t");
  REQUIRE(sel.step());
  CHECK(sel.column_count() == 5);
  CHECK(sel.column_name(2) == "s");
  CHECK(sel.column_int64(0) == -(std::int64_t{1} << 40));
  CHECK(sel.column_double(1) == 2.5);
  CHECK(sel.column_text(2) == with_nul);
  CHECK(sel.column_is_null(3));
  CHECK_FALSE(sel.column_opt_text(3));
  CHECK(sel.column_blob(4) == std::vector<std::uint8_t>{0, 1, 2, 255});
  CHECK_FALSE(sel.step());
  CHECK_THROWS_AS(db.prepare("SELEC nonsense"), leap::StoreError);
  CHECK_THROWS_AS(ins.bind_int64(9, 1), leap::StoreError);  // out-of-range index
}

TEST_CASE("store: foreign keys are enforced and runs cascade") {
  TempDir tmp;
  Store store(tmp.file());
  const std::string id = store.create_run(sample_run());
  store.write_step(make_step(id, 1));
  store.add_checkpoint(id, 1, "/tmp/ckpt1");
  store.create_evaluation({id, 1, "unit", "{}", std::nullopt});
  Database& db = store.db();
  CHECK_THROWS_AS(db.exec("INSERT INTO turns (rollout_id, turn_index, segment_index, prompt, "
                          "completion, prompt_tokens, completion_tokens, verdict, feedback, "
                          "reward, discounted_return, advantage, env_seconds, compacted) VALUES "
                          "(999999, 1, 0, '', '', 0, 0, 'correct', '', 0, 0, 0, 0, 0)"),
                  leap::StoreError);
  CHECK_THROWS_AS(db.exec("INSERT INTO groups (run_id, step, task_id, group_index, "
                          "dcp_activated, fail_ratio_turn1, recovered) VALUES ('" + id +
                          "', 5, 1, 0, 0, 0, 0)"),
                  leap::StoreError);  // step 5 does not exist
  CHECK_THROWS_AS(store.add_metric("no-such-run", 1, "x", 1.0), leap::StoreError);
  CHECK_THROWS_AS(db.exec("DELETE FROM tasks"), leap::StoreError);  // still referenced

  db.exec("DELETE FROM runs WHERE id = '" + id + "'");
  auto counts = store.row_counts();
  for (const char* t : {"runs", "steps", "groups", "rollouts", "turns", "metrics", "events",
                        "checkpoints", "evaluations"}) {
    CHECK_MESSAGE(counts[t] == 0, t << " should cascade");
  }
  CHECK(counts["tasks"] == kGroups);  // tasks are shared: kept
}

TEST_CASE("store: evaluations, checkpoints, events and resume truncation") {
  TempDir tmp;
  Store store(tmp.file());
  const std::string id = store.create_run(sample_run());
  for (int s = 1; s <= 3; ++s) {
    store.write_step(make_step(id, s));
    store.add_checkpoint(id, s, "/ckpt/step" + std::to_string(s), 1795966300.0 + s);
  }
  store.add_event(id, std::nullopt, "resume", "resumed from step 2");
  auto ck = store.latest_checkpoint(id);
  REQUIRE(ck);
  CHECK(ck->step == 3);
  CHECK(ck->path == "/ckpt/step3");
  CHECK(ck->created_at == doctest::Approx(1795966303.0));

  const auto ev = store.create_evaluation({id, 3, "unit-eval", R"({"samples":2})", std::nullopt});
  std::vector<EvalResultRecord> rows;
  for (int s = 0; s < 2; ++s) {
    EvalResultRecord r;
    r.task = task(s);
    r.sample = s;
    r.turn = 1;
    r.verdict = s == 0 ? "correct" : "timeout";
    if (s == 0) r.speedup = 1.7, r.candidate_ms = 1.0, r.reference_ms = 1.7;
    r.file = "/eval/" + std::to_string(s) + ".cu";
    r.suspicious = s == 0;
    rows.push_back(r);
  }
  store.add_eval_results(ev, rows);
  CHECK(store.count_rows("eval_results") == 2);
  CHECK(scalar_text(store.db(), "SELECT settings_json FROM evaluations") == R"({"samples":2})");
  CHECK(scalar_int(store.db(), "SELECT count(*) FROM eval_results WHERE speedup IS NULL") == 1);
  CHECK(scalar_int(store.db(), "SELECT sample FROM eval_results WHERE suspicious = 1") == 0);
  CHECK(scalar_int(store.db(), "SELECT count(*) FROM eval_results WHERE suspicious = 0") == 1);
  // leap report counts the stored flag as a hack.
  CHECK(leap::metrics::compute_metrics(leap::report::eval_input(store.db(), ev)).overall.hacks.at("suspicious_speedup") == 1);
  // A batch with a duplicate (task, sample, turn) is rejected as a whole.
  std::vector<EvalResultRecord> bad = rows;
  bad[0].sample = 5;
  CHECK_THROWS_AS(store.add_eval_results(ev, bad), leap::StoreError);
  CHECK(store.count_rows("eval_results") == 2);
  const auto standalone = store.create_evaluation({std::nullopt, std::nullopt, "b", "{}", 1.0});
  CHECK(standalone > ev);

  store.truncate_run_after(id, 2);
  CHECK(store.last_completed_step(id) == 2);
  CHECK(store.latest_checkpoint(id)->step == 2);
  CHECK(store.metric_series(id, "reward_mean").size() == 2);
  CHECK(store.count_rows("turns") == 2 * kGroups * kRollouts * kTurns);
  CHECK(store.count_rows("evaluations") == 1);  // the step-3 eval went, the standalone stays
  CHECK(store.count_rows("events") == 3);       // two step events + the step-less one
  store.write_step(make_step(id, 3));           // step 3 can be redone
  CHECK(store.last_completed_step(id) == 3);
}

TEST_CASE("store: a second connection reads committed data while a write is open (WAL)") {
  TempDir tmp;
  Store writer(tmp.file());
  const std::string id = writer.create_run(sample_run());
  writer.write_step(make_step(id, 1));
  Store reader(tmp.file(), OpenOptions{.busy_timeout_ms = 200});

  // A tiny page cache makes the open transaction spill pages to disk. In a rollback-journal
  // mode that takes an EXCLUSIVE lock and locks readers out; in WAL it does not.
  writer.db().exec("PRAGMA cache_size = -64");
  Transaction tx(writer.db());
  writer.add_metric(id, 2, "pending", 1.0);
  writer.db().exec("INSERT INTO steps VALUES ('" + id + "', 2, 0, 0, 0, 0, 0)");
  const std::string big(1000, 'x');
  for (int i = 0; i < 2000; ++i) writer.add_event(id, 2, "bulk", big);
  // The writer holds the write lock; the reader neither blocks nor sees uncommitted rows.
  CHECK(scalar_text(reader.db(), "PRAGMA journal_mode") == "wal");
  CHECK(reader.count_rows("events") == 1);
  CHECK(reader.last_completed_step(id) == 1);
  CHECK(reader.metric_series(id, "pending").empty());
  CHECK(reader.count_rows("turns") == kGroups * kRollouts * kTurns);
  // A second writer cannot start meanwhile: it times out with a clear error.
  CHECK_THROWS_AS(reader.add_metric(id, 2, "other", 1.0), leap::StoreError);
  tx.commit();
  CHECK(reader.last_completed_step(id) == 2);
  CHECK(reader.metric_series(id, "pending").size() == 1);
  CHECK(reader.count_rows("events") == 2001);
}

TEST_CASE("store: a reader thread sees only whole steps during many write_step calls") {
  TempDir tmp;
  Store writer(tmp.file());
  const std::string id = writer.create_run(sample_run());
  constexpr int kSteps = 150;
  std::atomic<bool> done{false};
  std::atomic<int> reads{0}, torn{0}, partial_views{0};
  std::string reader_error;

  std::thread reader([&] {
    try {
      Store r(tmp.file());
      auto check_once = [&] {
        // One statement reads one snapshot.
        Statement st = r.db().prepare(
            "SELECT (SELECT count(*) FROM steps), (SELECT count(*) FROM groups), "
            "(SELECT count(*) FROM rollouts), (SELECT count(*) FROM turns), "
            "(SELECT count(*) FROM metrics), (SELECT count(*) FROM events)");
        if (!st.step()) {
          ++torn;
          return;
        }
        const auto steps = st.column_int64(0);
        if (st.column_int64(1) != steps * kGroups ||
            st.column_int64(2) != steps * kGroups * kRollouts ||
            st.column_int64(3) != steps * kGroups * kRollouts * kTurns ||
            st.column_int64(4) != steps * 2 || st.column_int64(5) != steps) {
          ++torn;
        }
        if (steps > 0 && steps < kSteps) ++partial_views;
        ++reads;
      };
      while (!done.load()) check_once();
      check_once();
    } catch (const std::exception& e) {
      reader_error = e.what();
    }
  });
  for (int s = 1; s <= kSteps; ++s) writer.write_step(make_step(id, s));
  done = true;
  reader.join();
  CHECK(reader_error == "");
  CHECK(reads.load() > 1);
  CHECK(torn.load() == 0);
  MESSAGE("reader snapshots: " << reads.load() << ", mid-run: " << partial_views.load());
  CHECK(writer.last_completed_step(id) == kSteps);
}

TEST_CASE("store: docs/schema.md documents every column") {
  const std::string md = read_file(fs::path(LEAP_SOURCE_DIR) / "docs" / "schema.md");
  Database db(":memory:");
  for (const std::string& table : Store::table_names()) {
    const std::string heading = "### `" + table + "`";
    const auto start = md.find(heading);
    REQUIRE_MESSAGE(start != std::string::npos, "docs/schema.md lacks section " << heading);
    auto end = md.find("\n### ", start + heading.size());
    if (end == std::string::npos) end = md.find("\n## ", start);
    const std::string section = md.substr(start, end - start);
    Statement cols = db.prepare("SELECT name FROM pragma_table_info(?1)");
    cols.bind_text(1, table);
    int n = 0;
    while (cols.step()) {
      ++n;
      const std::string col = cols.column_text(0);
      CHECK_MESSAGE(section.find("| `" + col + "` |") != std::string::npos,
                    "docs/schema.md: table " << table << " lacks column " << col);
    }
    CHECK(n > 0);
  }
}

TEST_CASE("store: docs/schema.md example queries run") {
  TempDir tmp;
  Store store(tmp.file());
  store.create_run(sample_run("older"));  // not the latest run: no steps
  RunInfo latest = sample_run("latest");
  latest.started_at = 1795970000.0;
  const std::string id = store.create_run(latest);
  for (int s = 1; s <= 3; ++s) store.write_step(make_step(id, s));

  const auto blocks = sql_blocks(read_file(fs::path(LEAP_SOURCE_DIR) / "docs" / "schema.md"));
  REQUIRE(blocks.size() >= 5);
  for (const std::string& sql : blocks) {
    CAPTURE(sql);
    Statement st = store.db().prepare(sql);
    int rows = 0;
    while (st.step()) ++rows;
    CHECK(rows > 0);  // every example returns something on a real store
  }
  // Spot-check two answers against the data make_step writes.
  Statement dcp = store.db().prepare(blocks[2]);
  REQUIRE(dcp.step());
  CHECK(dcp.column_int64(0) == 1);
  CHECK(dcp.column_int64(1) == kGroups);
  CHECK(dcp.column_double(2) == doctest::Approx(0.5));
  Statement pass = store.db().prepare(blocks[1]);
  REQUIRE(pass.step());  // turn 1: rollout 0 of 3 correct; Acc@1 = 1/3
  CHECK(pass.column_int64(0) == 1);
  CHECK(pass.column_double(2) == doctest::Approx(1.0 / 3.0));
  CHECK(pass.column_double(3) == doctest::Approx(1.0 / 3.0));
  REQUIRE(pass.step());  // turn 2: rollouts 0 and 1 correct; Acc@2 = 2/3
  CHECK(pass.column_double(2) == doctest::Approx(2.0 / 3.0));
  CHECK(pass.column_double(3) == doctest::Approx(2.0 / 3.0));
}

TEST_SUITE_END();

TEST_CASE("store: a v2 store (runs without a lease) is readable read-only and takes a lease after migrating") {
  TempDir tmp;
  {
    Database db(tmp.file(), OpenOptions{.migrate = false});
    migrate(db, {migrations()[0], migrations()[1]});
    REQUIRE(db.user_version() == 2);
    db.exec("INSERT INTO runs (id, name, kind, config_yaml, config_hash, seed, git_commit, hostname, started_at) "
            "VALUES ('r1', 'n', 'train', '', '', 1, '', 'h', 1.0)");
  }
  {
    Store ro(tmp.file(), OpenOptions{.read_only = true});
    CHECK(ro.db().user_version() == 2);  // read as it is
    REQUIRE(ro.get_run("r1").has_value());
    CHECK(ro.get_run("r1")->status == RunStatus::running);
  }
  Store store(tmp.file());
  CHECK(store.db().user_version() == kSchemaVersion);
  CHECK_FALSE(store.get_lease("r1").has_value());
  leap::store::RunLease me{"h", 7, 5.0, 0};
  CHECK_FALSE(store.acquire_lease("r1", me, [](const leap::store::RunLease&) { return std::optional<std::string>(); })
                  .has_value());
  CHECK(store.get_lease("r1")->pid == 7);
  store.finish_run("r1", RunStatus::failed);
  CHECK_FALSE(store.get_lease("r1").has_value());
}

TEST_CASE("store: a read-only open of an empty file or a foreign SQLite file says it is not a leap store") {
  TempDir tmp;
  { std::ofstream(tmp.file()).flush(); }  // 0 bytes, as `touch`
  REQUIRE(std::filesystem::file_size(tmp.file()) == 0);
  try {
    Store ro(tmp.file(), OpenOptions{.read_only = true});
    FAIL("an empty file opened as a store");
  } catch (const leap::StoreError& e) {
    CHECK(std::string(e.what()).find("not a leap store") != std::string::npos);
    CHECK(std::string(e.what()).find(tmp.file().string()) != std::string::npos);
    CHECK(std::string(e.what()).find("no such table") == std::string::npos);
  }
  CHECK(std::filesystem::file_size(tmp.file()) == 0);  // nothing written
  TempDir other;
  {
    Database foreign(other.file(), OpenOptions{.migrate = false});
    foreign.exec("PRAGMA application_id = 0");
    foreign.exec("CREATE TABLE t (x)");
  }
  CHECK_THROWS_WITH_AS(Store(other.file(), OpenOptions{.read_only = true}),
                       doctest::Contains("not a leap database"), leap::StoreError);
}

TEST_CASE("store: write_evaluation writes the evaluation, its results and metrics in one transaction") {
  TempDir tmp;
  Store store(tmp.file());
  leap::store::RunInfo ri;
  ri.name = "n";
  const auto run = store.create_run(ri);
  EvaluationInfo info;
  info.run_id = run;
  info.step = 4;
  info.bench = "b";
  EvalResultRecord r;
  r.task = {"s", "t", std::nullopt, std::nullopt, "h"};
  r.verdict = "correct";
  EvalResultRecord r2 = r;
  r2.sample = 1;
  const auto id = store.write_evaluation(info, {r, r2}, {{"eval/acc@1", 0.5, std::nullopt}});
  CHECK(id > 0);
  CHECK(store.has_evaluation(run, 4));
  CHECK_FALSE(store.has_evaluation(run, 3));
  CHECK(store.count_rows("eval_results") == 2);
  CHECK(store.metric_at(run, "eval/acc@1", 4) == doctest::Approx(0.5));
  // A failing row (an unknown run for the metrics) leaves nothing at all.
  info.run_id = "no-such-run";
  CHECK_THROWS_AS(store.write_evaluation(info, {r}, {{"eval/acc@1", 0.5, std::nullopt}}), leap::StoreError);
  CHECK(store.count_rows("evaluations") == 1);
  CHECK(store.count_rows("eval_results") == 2);
}
