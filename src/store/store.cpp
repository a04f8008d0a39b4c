#include "store/store.hpp"

#include <cmath>
#include <limits>

#include "store/clock.hpp"
#include "store/run_id.hpp"
#include "store/transaction.hpp"
#include "util/error.hpp"

namespace leap::store {

namespace {

constexpr std::string_view kInsertTurn = R"SQL(
INSERT INTO turns (rollout_id, turn_index, segment_index, prompt, completion, prompt_tokens,
                   completion_tokens, verdict, feedback, candidate_ms, reference_ms, speedup,
                   suspicious, reward, discounted_return, advantage, old_logprob_mean,
                   new_logprob_mean, env_seconds, compacted, node_index, parent_index, kb_snippets)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23)
)SQL";

constexpr std::string_view kInsertRollout = R"SQL(
INSERT INTO rollouts (group_id, rollout_index, final_verdict, first_success_turn, reward,
                      advantage, reward_rank, reward_binary, reward_speedup, reward_kernelgym)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
)SQL";

constexpr std::string_view kInsertGroup = R"SQL(
INSERT INTO groups (run_id, step, task_id, group_index, dcp_activated, fail_ratio_turn1, recovered)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
)SQL";

constexpr std::string_view kInsertMetric =
    "INSERT INTO metrics (run_id, step, name, value, wall_time) VALUES (?1, ?2, ?3, ?4, ?5)";
constexpr std::string_view kInsertEvent =
    "INSERT INTO events (run_id, step, time, kind, message) VALUES (?1, ?2, ?3, ?4, ?5)";

/// Prepared once per Store operation, reused for every row of that operation.
class TaskResolver {
 public:
  explicit TaskResolver(Database& db)
      : insert_(db.prepare("INSERT OR IGNORE INTO tasks (task_set, name, level, category, hash) "
                           "VALUES (?1, ?2, ?3, ?4, ?5)")),
        select_(db.prepare("SELECT id FROM tasks WHERE task_set = ?1 AND name = ?2 AND hash = ?3")) {}

  std::int64_t resolve(const TaskInfo& t) {
    insert_.reset();
    insert_.bind_text(1, t.task_set).bind_text(2, t.name).bind_opt_int64(3, t.level);
    insert_.bind_opt_text(4, t.category).bind_text(5, t.hash);
    insert_.run();
    select_.reset();
    select_.bind_text(1, t.task_set).bind_text(2, t.name).bind_text(3, t.hash);
    if (!select_.step()) {
      throw StoreError("task " + t.task_set + "/" + t.name + " could not be inserted");
    }
    return select_.column_int64(0);
  }

 private:
  Statement insert_;
  Statement select_;
};

void insert_metric(Statement& st, const std::string& run_id, std::int64_t step,
                   std::string_view name, double value, std::optional<double> wall_time) {
  st.reset();
  st.bind_text(1, run_id).bind_int64(2, step).bind_text(3, name);
  if (std::isnan(value)) {
    st.bind_null(4);
  } else {
    st.bind_double(4, value);
  }
  st.bind_double(5, wall_time.value_or(unix_now()));
  st.run();
}

void insert_event(Statement& st, const std::string& run_id, std::optional<std::int64_t> step,
                  std::string_view kind, std::string_view message, std::optional<double> time) {
  st.reset();
  st.bind_text(1, run_id).bind_opt_int64(2, step).bind_double(3, time.value_or(unix_now()));
  st.bind_text(4, kind).bind_text(5, message);
  st.run();
}

void write_lease(Database& db, const std::string& run_id, const RunLease& l, double now) {
  Statement st = db.prepare(
      "UPDATE runs SET lease_host = ?2, lease_pid = ?3, lease_process_started_at = ?4, "
      "lease_refreshed_at = ?5 WHERE id = ?1");
  st.bind_text(1, run_id).bind_text(2, l.host).bind_int64(3, l.pid);
  st.bind_double(4, l.process_started_at).bind_double(5, now);
  st.run();
}

std::optional<RunLease> read_lease(Database& db, const std::string& run_id) {
  Statement st = db.prepare(
      "SELECT lease_host, lease_pid, lease_process_started_at, lease_refreshed_at FROM runs "
      "WHERE id = ?1 AND lease_pid IS NOT NULL");
  st.bind_text(1, run_id);
  if (!st.step()) return std::nullopt;
  return RunLease{.host = st.column_text(0),
                  .pid = st.column_int64(1),
                  .process_started_at = st.column_opt_double(2).value_or(0),
                  .refreshed_at = st.column_opt_double(3).value_or(0)};
}

bool same_holder(const RunLease& a, const RunLease& b) {
  return a.host == b.host && a.pid == b.pid && std::abs(a.process_started_at - b.process_started_at) < 1e-3;
}

std::string describe(const RunLease& l) {
  return "pid " + std::to_string(l.pid) + " on host " + l.host;
}

RunRow read_run(Statement& st) {
  RunRow r;
  r.id = st.column_text(0);
  r.name = st.column_text(1);
  r.kind = parse_run_kind(st.column_text(2));
  r.status = parse_run_status(st.column_text(3));
  r.config_yaml = st.column_text(4);
  r.config_hash = st.column_text(5);
  r.seed = st.column_int64(6);
  r.git_commit = st.column_text(7);
  r.hostname = st.column_text(8);
  r.started_at = st.column_double(9);
  r.ended_at = st.column_opt_double(10);
  return r;
}

constexpr std::string_view kSelectRun =
    "SELECT id, name, kind, status, config_yaml, config_hash, seed, git_commit, hostname, "
    "started_at, ended_at FROM runs";

}  // namespace

Store::Store(const std::filesystem::path& path, const OpenOptions& options)
    : db_(path, options) {}

const std::vector<std::string>& Store::table_names() {
  static const std::vector<std::string> names = {
      "runs",        "tasks",        "steps",   "groups",      "rollouts", "turns",
      "evaluations", "eval_results", "metrics", "checkpoints", "events"};
  return names;
}

void Store::require_run(const std::string& run_id) {
  Statement st = db_.prepare("SELECT 1 FROM runs WHERE id = ?1");
  st.bind_text(1, run_id);
  if (!st.step()) throw StoreError("store " + path() + ": unknown run '" + run_id + "'");
}

std::string Store::create_run(const RunInfo& info) {
  const double started = info.started_at.value_or(unix_now());
  Transaction tx(db_);
  Statement exists = db_.prepare("SELECT 1 FROM runs WHERE id = ?1");
  std::string id = info.id.empty() ? make_run_id(started) : info.id;
  for (int attempt = 0;; ++attempt) {
    exists.reset();
    exists.bind_text(1, id);
    if (!exists.step()) break;
    if (!info.id.empty()) {
      throw StoreError("store " + path() + ": run id '" + id + "' already exists");
    }
    if (attempt >= 100) {
      throw StoreError("store " + path() + ": cannot generate a unique run id");
    }
    id = make_run_id(started);
  }
  Statement st = db_.prepare(
      "INSERT INTO runs (id, name, kind, status, config_yaml, config_hash, seed, git_commit, "
      "hostname, started_at) VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9)");
  st.bind_text(1, id).bind_text(2, info.name).bind_text(3, to_string(info.kind));
  st.bind_text(4, info.config_yaml).bind_text(5, info.config_hash).bind_int64(6, info.seed);
  st.bind_text(7, info.git_commit).bind_text(8, info.hostname).bind_double(9, started);
  st.run();
  if (info.lease) write_lease(db_, id, *info.lease, started);
  tx.commit();
  return id;
}

void Store::finish_run(const std::string& run_id, RunStatus status,
                       std::optional<double> ended_at) {
  Statement st = db_.prepare(
      "UPDATE runs SET status = ?2, ended_at = ?3, lease_host = NULL, lease_pid = NULL, "
      "lease_process_started_at = NULL, lease_refreshed_at = NULL WHERE id = ?1");
  st.bind_text(1, run_id).bind_text(2, to_string(status));
  st.bind_double(3, ended_at.value_or(unix_now()));
  st.run();
  if (db_.changes() != 1) throw StoreError("store " + path() + ": unknown run '" + run_id + "'");
}

void Store::release_lease(const std::string& run_id, const RunLease& me) {
  Statement st = db_.prepare(
      "UPDATE runs SET lease_host = NULL, lease_pid = NULL, lease_process_started_at = NULL, "
      "lease_refreshed_at = NULL WHERE id = ?1 AND lease_host = ?2 AND lease_pid = ?3");
  st.bind_text(1, run_id).bind_text(2, me.host).bind_int64(3, me.pid);
  st.run();
}

void Store::reopen_run(const std::string& run_id) {
  Statement st = db_.prepare("UPDATE runs SET status = 'running', ended_at = NULL WHERE id = ?1");
  st.bind_text(1, run_id);
  st.run();
  if (db_.changes() != 1) throw StoreError("store " + path() + ": unknown run '" + run_id + "'");
}

std::optional<RunLease> Store::acquire_lease(
    const std::string& run_id, const RunLease& me,
    const std::function<std::optional<std::string>(const RunLease&)>& stale_reason) {
  Transaction tx(db_);
  require_run(run_id);
  const double now = unix_now();
  std::optional<RunLease> old = read_lease(db_, run_id);
  std::optional<RunLease> taken;
  if (old && !same_holder(*old, me)) {
    std::optional<std::string> why = stale_reason(*old);
    if (!why) {
      throw LeaseHeldError("store " + path() + ": run '" + run_id + "' is being written by " + describe(*old) +
                               " (lease refreshed " + std::to_string(static_cast<int64_t>(now - old->refreshed_at)) +
                               " s ago); stop that process first, or wait until it ends",
                           *old);
    }
    Statement ev = db_.prepare(kInsertEvent);
    insert_event(ev, run_id, std::nullopt, "lease",
                 "took over the lease of " + describe(*old) + " from " + describe(me) + ": " + *why, now);
    taken = old;
  }
  write_lease(db_, run_id, me, now);
  tx.commit();
  return taken;
}

void Store::refresh_lease(const std::string& run_id, const RunLease& me, std::optional<double> at) {
  Transaction tx(db_);
  require_run(run_id);
  std::optional<RunLease> cur = read_lease(db_, run_id);
  if (!cur || !same_holder(*cur, me))
    throw LeaseLostError("store " + path() + ": run '" + run_id + "' is no longer written by this process (" +
                         describe(me) + "): " +
                         (cur ? "its lease was taken over by " + describe(*cur) : std::string("its lease was released")));
  Statement st = db_.prepare("UPDATE runs SET lease_refreshed_at = ?2 WHERE id = ?1");
  st.bind_text(1, run_id).bind_double(2, at.value_or(unix_now()));
  st.run();
  tx.commit();
}

std::optional<RunLease> Store::get_lease(const std::string& run_id) { return read_lease(db_, run_id); }

std::int64_t Store::ensure_task(const TaskInfo& task) {
  TaskResolver resolver(db_);
  return resolver.resolve(task);
}

void Store::write_step(const StepRecord& s) {
  try {
    Transaction tx(db_);
    require_run(s.run_id);
    Statement step = db_.prepare(
        "INSERT INTO steps (run_id, step, started_at, ended_at, generation_seconds, env_seconds, "
        "update_seconds) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
    step.bind_text(1, s.run_id).bind_int64(2, s.step).bind_double(3, s.started_at);
    step.bind_double(4, s.ended_at).bind_double(5, s.generation_seconds);
    step.bind_double(6, s.env_seconds).bind_double(7, s.update_seconds);
    step.run();

    TaskResolver tasks(db_);
    Statement group = db_.prepare(kInsertGroup);
    Statement rollout = db_.prepare(kInsertRollout);
    Statement turn = db_.prepare(kInsertTurn);
    for (const GroupRecord& g : s.groups) {
      const std::int64_t task_id = tasks.resolve(g.task);
      group.reset();
      group.bind_text(1, s.run_id).bind_int64(2, s.step).bind_int64(3, task_id);
      group.bind_int64(4, g.group_index).bind_int64(5, g.dcp_activated ? 1 : 0);
      group.bind_double(6, g.fail_ratio_turn1).bind_int64(7, g.recovered);
      group.run();
      const std::int64_t group_id = db_.last_insert_rowid();
      for (const RolloutRecord& r : g.rollouts) {
        rollout.reset();
        rollout.bind_int64(1, group_id).bind_int64(2, r.rollout_index);
        rollout.bind_text(3, r.final_verdict).bind_opt_int64(4, r.first_success_turn);
        rollout.bind_double(5, r.reward).bind_opt_double(6, r.advantage);
        rollout.bind_opt_double(7, r.reward_rank).bind_opt_double(8, r.reward_binary);
        rollout.bind_opt_double(9, r.reward_speedup).bind_opt_double(10, r.reward_kernelgym);
        rollout.run();
        const std::int64_t rollout_id = db_.last_insert_rowid();
        for (const TurnRecord& t : r.turns) {
          turn.reset();
          turn.bind_int64(1, rollout_id).bind_int64(2, t.turn_index);
          turn.bind_int64(3, t.segment_index).bind_text(4, t.prompt).bind_text(5, t.completion);
          turn.bind_int64(6, t.prompt_tokens).bind_int64(7, t.completion_tokens);
          turn.bind_text(8, t.verdict).bind_text(9, t.feedback);
          turn.bind_opt_double(10, t.candidate_ms).bind_opt_double(11, t.reference_ms);
          turn.bind_opt_double(12, t.speedup).bind_int64(13, t.suspicious ? 1 : 0);
          turn.bind_double(14, t.reward).bind_double(15, t.discounted_return);
          turn.bind_double(16, t.advantage).bind_opt_double(17, t.old_logprob_mean);
          turn.bind_opt_double(18, t.new_logprob_mean).bind_double(19, t.env_seconds);
          turn.bind_int64(20, t.compacted ? 1 : 0);
          turn.bind_int64(21, t.node_index).bind_opt_int64(22, t.parent_index).bind_text(23, t.kb_snippets);
          turn.run();
        }
      }
    }
    Statement metric = db_.prepare(kInsertMetric);
    for (const MetricRecord& m : s.metrics) {
      insert_metric(metric, s.run_id, s.step, m.name, m.value, m.wall_time);
    }
    Statement event = db_.prepare(kInsertEvent);
    for (const EventRecord& e : s.events) {
      insert_event(event, s.run_id, s.step, e.kind, e.message, e.time);
    }
    tx.commit();
  } catch (const StoreError& e) {
    throw StoreError("store " + path() + ": write_step of run '" + s.run_id + "' step " +
                     std::to_string(s.step) + " rolled back: " + e.what());
  }
}

void Store::add_metric(const std::string& run_id, std::int64_t step, std::string_view name,
                       double value, std::optional<double> wall_time) {
  Statement st = db_.prepare(kInsertMetric);
  insert_metric(st, run_id, step, name, value, wall_time);
}

void Store::add_event(const std::string& run_id, std::optional<std::int64_t> step,
                      std::string_view kind, std::string_view message,
                      std::optional<double> time) {
  Statement st = db_.prepare(kInsertEvent);
  insert_event(st, run_id, step, kind, message, time);
}

std::int64_t Store::add_checkpoint(const std::string& run_id, std::int64_t step,
                                   std::string_view ckpt_path, std::optional<double> created_at) {
  Statement st = db_.prepare(
      "INSERT INTO checkpoints (run_id, step, path, created_at) VALUES (?1, ?2, ?3, ?4)");
  st.bind_text(1, run_id).bind_int64(2, step).bind_text(3, ckpt_path);
  st.bind_double(4, created_at.value_or(unix_now()));
  st.run();
  return db_.last_insert_rowid();
}

std::int64_t Store::create_evaluation(const EvaluationInfo& info) {
  Statement st = db_.prepare(
      "INSERT INTO evaluations (run_id, step, bench, created_at, settings_json) "
      "VALUES (?1, ?2, ?3, ?4, ?5)");
  st.bind_opt_text(1, info.run_id).bind_opt_int64(2, info.step).bind_text(3, info.bench);
  st.bind_double(4, info.created_at.value_or(unix_now())).bind_text(5, info.settings_json);
  st.run();
  return db_.last_insert_rowid();
}

namespace {

// The eval_results rows of one evaluation (inside the caller's transaction).
void insert_eval_results(Database& db, std::int64_t evaluation_id, const std::vector<EvalResultRecord>& results) {
  TaskResolver tasks(db);
  Statement st = db.prepare(
      "INSERT INTO eval_results (evaluation_id, task_id, sample, turn, verdict, speedup, "
      "candidate_ms, reference_ms, file, suspicious) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
  for (const EvalResultRecord& r : results) {
    const std::int64_t task_id = tasks.resolve(r.task);
    st.reset();
    st.bind_int64(1, evaluation_id).bind_int64(2, task_id).bind_int64(3, r.sample);
    st.bind_int64(4, r.turn).bind_text(5, r.verdict).bind_opt_double(6, r.speedup);
    st.bind_opt_double(7, r.candidate_ms).bind_opt_double(8, r.reference_ms);
    st.bind_opt_text(9, r.file).bind_int64(10, r.suspicious ? 1 : 0);
    st.run();
  }
}

}  // namespace

std::int64_t Store::write_evaluation(const EvaluationInfo& info, const std::vector<EvalResultRecord>& results,
                                     const std::vector<MetricRecord>& metrics) {
  try {
    Transaction tx(db_);
    const std::int64_t evaluation_id = create_evaluation(info);
    insert_eval_results(db_, evaluation_id, results);
    if (!metrics.empty()) {
      if (!info.run_id) throw StoreError("metrics of an evaluation need its run");
      Statement metric = db_.prepare(kInsertMetric);
      for (const MetricRecord& m : metrics)
        insert_metric(metric, *info.run_id, info.step.value_or(0), m.name, m.value, m.wall_time);
    }
    tx.commit();
    return evaluation_id;
  } catch (const StoreError& e) {
    throw StoreError("store " + path() + ": write_evaluation" +
                     (info.run_id ? " of run '" + *info.run_id + "'" : std::string()) +
                     (info.step ? " step " + std::to_string(*info.step) : std::string()) +
                     " rolled back: " + e.what());
  }
}

void Store::add_eval_results(std::int64_t evaluation_id,
                             const std::vector<EvalResultRecord>& results) {
  try {
    Transaction tx(db_);
    insert_eval_results(db_, evaluation_id, results);
    tx.commit();
  } catch (const StoreError& e) {
    throw StoreError("store " + path() + ": add_eval_results for evaluation " +
                     std::to_string(evaluation_id) + " rolled back: " + e.what());
  }
}

void Store::truncate_run_after(const std::string& run_id, std::int64_t step) {
  Transaction tx(db_);
  require_run(run_id);
  for (const char* table : {"steps", "metrics", "events", "checkpoints", "evaluations"}) {
    Statement st = db_.prepare(std::string("DELETE FROM ") + table +
                               " WHERE run_id = ?1 AND step > ?2");
    st.bind_text(1, run_id).bind_int64(2, step);
    st.run();
  }
  tx.commit();
}

std::vector<RunRow> Store::list_runs() {
  std::string sql(kSelectRun);
  sql += " ORDER BY started_at DESC, id DESC";
  Statement st = db_.prepare(sql);
  std::vector<RunRow> out;
  while (st.step()) out.push_back(read_run(st));
  return out;
}

std::optional<RunRow> Store::get_run(const std::string& run_id) {
  std::string sql(kSelectRun);
  sql += " WHERE id = ?1";
  Statement st = db_.prepare(sql);
  st.bind_text(1, run_id);
  if (!st.step()) return std::nullopt;
  return read_run(st);
}

std::vector<MetricPoint> Store::metric_series(const std::string& run_id, std::string_view name) {
  Statement st = db_.prepare(
      "SELECT step, value, wall_time FROM metrics WHERE run_id = ?1 AND name = ?2 "
      "ORDER BY step, id");
  st.bind_text(1, run_id).bind_text(2, name);
  std::vector<MetricPoint> out;
  while (st.step()) {
    MetricPoint p;
    p.step = st.column_int64(0);
    p.value = st.column_opt_double(1).value_or(std::numeric_limits<double>::quiet_NaN());
    p.wall_time = st.column_double(2);
    out.push_back(p);
  }
  return out;
}

std::int64_t Store::count_rows(std::string_view table) {
  bool known = false;
  for (const std::string& t : table_names()) known = known || t == table;
  if (!known) {
    throw StoreError("store " + path() + ": count_rows of unknown table '" + std::string(table) +
                     "'");
  }
  Statement st = db_.prepare("SELECT count(*) FROM " + std::string(table));
  st.step();
  return st.column_int64(0);
}

std::map<std::string, std::int64_t> Store::row_counts() {
  std::string sql = "SELECT ";
  const auto& names = table_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    sql += (i ? ", " : "") + std::string("(SELECT count(*) FROM ") + names[i] + ")";
  }
  Statement st = db_.prepare(sql);  // one statement: one read snapshot
  st.step();
  std::map<std::string, std::int64_t> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    out[names[i]] = st.column_int64(static_cast<int>(i));
  }
  return out;
}

std::optional<std::int64_t> Store::last_completed_step(const std::string& run_id) {
  Statement st = db_.prepare("SELECT max(step) FROM steps WHERE run_id = ?1");
  st.bind_text(1, run_id);
  st.step();
  return st.column_opt_int64(0);
}

bool Store::has_evaluation(const std::string& run_id, std::int64_t step) {
  Statement st = db_.prepare("SELECT 1 FROM evaluations WHERE run_id = ?1 AND step = ?2 LIMIT 1");
  st.bind_text(1, run_id).bind_int64(2, step);
  return st.step();
}

std::optional<double> Store::metric_at(const std::string& run_id, std::string_view name, std::int64_t step) {
  Statement st = db_.prepare(
      "SELECT value FROM metrics WHERE run_id = ?1 AND name = ?2 AND step = ?3 ORDER BY id DESC LIMIT 1");
  st.bind_text(1, run_id).bind_text(2, name).bind_int64(3, step);
  if (!st.step()) return std::nullopt;
  return st.column_opt_double(0);
}

std::optional<CheckpointRow> Store::latest_checkpoint(const std::string& run_id) {
  Statement st = db_.prepare(
      "SELECT id, run_id, step, path, created_at FROM checkpoints WHERE run_id = ?1 "
      "ORDER BY step DESC, id DESC LIMIT 1");
  st.bind_text(1, run_id);
  if (!st.step()) return std::nullopt;
  return CheckpointRow{.id = st.column_int64(0),
                       .run_id = st.column_text(1),
                       .step = st.column_int64(2),
                       .path = st.column_text(3),
                       .created_at = st.column_double(4)};
}

}  // namespace leap::store
