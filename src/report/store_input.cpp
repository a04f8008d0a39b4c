#include "report/store_input.hpp"

namespace leap::report {

namespace {

/// An attempt's sample, turn, verdict, speedup and suspicious flag from columns c .. c + 4 of
/// the current row (the task is the caller's).
metrics::Attempt attempt_columns(store::Statement& st, int c) {
  metrics::Attempt a;
  a.sample = st.column_int64(c);
  a.turn = st.column_int64(c + 1);
  a.verdict = st.column_text(c + 2);
  a.speedup = st.column_opt_double(c + 3);
  a.suspicious = st.column_int64(c + 4) != 0;
  return a;
}

}  // namespace

metrics::MetricsInput eval_input(store::Database& db, int64_t evaluation_id) {
  metrics::MetricsInput in;
  // T of Acc@1..T from the evaluation's settings (the trainer's and leap eval --model/--run write
  // "turns"): the highest turn stored is less when every task passed early, and a run that solved
  // everything at turn 1 once lost its Acc@2 from the arm's mean (a new user, 2026-12-07).
  {
    store::Statement s = db.prepare("SELECT json_extract(settings_json, '$.turns') FROM evaluations WHERE id = ?1");
    s.bind_int64(1, evaluation_id);
    if (s.step())
      if (auto turns = s.column_opt_int64(0); turns && *turns > 0) in.turns = *turns;
  }
  store::Statement t = db.prepare(
      "SELECT DISTINCT t.name, t.level FROM eval_results r JOIN tasks t ON t.id = r.task_id "
      "WHERE r.evaluation_id = ?1 ORDER BY t.name");
  t.bind_int64(1, evaluation_id);
  while (t.step()) in.tasks.push_back({t.column_text(0), t.column_opt_int64(1)});
  store::Statement st = db.prepare(
      std::string("SELECT t.name, r.sample, r.turn, r.verdict, r.speedup, ") +
      // eval_results.suspicious is schema v2; `leap report` opens older stores read-only, unmigrated.
      (db.has_column("eval_results", "suspicious") ? "r.suspicious" : "0") +
      " FROM eval_results r JOIN tasks t ON t.id = r.task_id "
      "WHERE r.evaluation_id = ?1 ORDER BY r.id");
  st.bind_int64(1, evaluation_id);
  while (st.step()) {
    metrics::Attempt a = attempt_columns(st, 1);
    a.task = st.column_text(0);
    in.attempts.push_back(std::move(a));
  }
  return in;
}

metrics::MetricsInput train_input(store::Database& db, const std::string& run_id, int64_t first_step, int64_t last_step) {
  metrics::MetricsInput in;
  store::Statement st = db.prepare(
      "SELECT g.step, g.group_index, t.name, t.level, r.rollout_index, u.turn_index, u.verdict, u.speedup, "
      "u.suspicious, u.completion_tokens FROM turns u JOIN rollouts r ON r.id = u.rollout_id "
      "JOIN groups g ON g.id = r.group_id JOIN tasks t ON t.id = g.task_id "
      "WHERE g.run_id = ?1 AND g.step BETWEEN ?2 AND ?3 ORDER BY g.step, g.group_index, r.rollout_index, u.turn_index");
  st.bind_text(1, run_id).bind_int64(2, first_step).bind_int64(3, last_step);
  std::string last_key;
  while (st.step()) {
    metrics::Attempt a = attempt_columns(st, 4);
    a.task = std::to_string(st.column_int64(0)) + "/" + std::to_string(st.column_int64(1)) + "/" + st.column_text(2);
    if (a.task != last_key) in.tasks.push_back({a.task, st.column_opt_int64(3)}), last_key = a.task;
    a.tokens = st.column_int64(9);
    in.attempts.push_back(std::move(a));
  }
  return in;
}

}  // namespace leap::report
