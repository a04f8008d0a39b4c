#include "report/curves.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "report/ablation.hpp"

namespace leap::report {

namespace {

/// What the store holds about one training step of a run.
struct StepRow {
  double ended_at = NAN;
  double rollouts = 0, pass_turn1 = 0, passed = 0, first_turn_sum = 0, turns = 0;
  double groups = 0, activated = 0;
};

/// Steps (from the steps table, else from the groups) with their rollout and turn counts.
/// Runs `sql` (the run id bound as ?1, column 0 a step) and hands each row's step record and the
/// statement to `read`.
void per_step(store::Database& db, const char* sql, const std::string& run, std::map<int64_t, StepRow>& steps,
              const std::function<void(StepRow&, store::Statement&)>& read) {
  store::Statement q = db.prepare(sql);
  q.bind_text(1, run);
  while (q.step()) read(steps[q.column_int64(0)], q);
}

std::map<int64_t, StepRow> read_steps(store::Store& st, const std::string& run) {
  std::map<int64_t, StepRow> steps;
  auto& db = st.db();
  per_step(db, "SELECT step, ended_at FROM steps WHERE run_id = ?1 ORDER BY step", run, steps,
           [](StepRow& s, store::Statement& q) { s.ended_at = q.column_double(1); });
  per_step(db,
           "SELECT g.step, count(*), coalesce(sum(o.first_success_turn = 1), 0), "
           "count(o.first_success_turn), coalesce(sum(o.first_success_turn), 0) "
           "FROM rollouts o JOIN groups g ON g.id = o.group_id WHERE g.run_id = ?1 GROUP BY g.step",
           run, steps, [](StepRow& s, store::Statement& q) {
             s.rollouts = q.column_double(1);
             s.pass_turn1 = q.column_double(2);
             s.passed = q.column_double(3);
             s.first_turn_sum = q.column_double(4);
           });
  per_step(db,
           "SELECT g.step, count(*) FROM turns u JOIN rollouts o ON o.id = u.rollout_id "
           "JOIN groups g ON g.id = o.group_id WHERE g.run_id = ?1 GROUP BY g.step",
           run, steps, [](StepRow& s, store::Statement& q) { s.turns = q.column_double(1); });
  per_step(db, "SELECT step, count(*), sum(dcp_activated) FROM groups WHERE run_id = ?1 GROUP BY step", run, steps,
           [](StepRow& s, store::Statement& q) {
             s.groups = q.column_double(1);
             s.activated = q.column_double(2);
           });
  return steps;
}

/// The step's value of a trainer metric (NaN when absent).
std::map<int64_t, store::MetricPoint> metric_by_step(store::Store& st, const std::string& run, const std::string& name) {
  std::map<int64_t, store::MetricPoint> m;
  for (const auto& p : st.metric_series(run, name))
    if (!std::isnan(p.value)) m[p.step] = p;
  return m;
}

}  // namespace

RunCurves read_run_curves(store::Store& st, const RunSummary& run) {
  RunCurves out;
  out.run_id = run.run.id;
  const std::string& id = run.run.id;
  const double t0 = run.run.started_at;
  std::map<int64_t, StepRow> steps = read_steps(st, id);
  const auto env_metric = metric_by_step(st, id, "env_calls");
  const auto m_acc1 = metric_by_step(st, id, "train_acc@1"), m_accT = metric_by_step(st, id, "train_acc@T");
  const auto m_reward = metric_by_step(st, id, "reward_mean"), m_act = metric_by_step(st, id, "activated_groups_frac");
  // Wall time of a step without a steps row: the time its metrics were written.
  for (const auto* m : {&m_reward, &m_acc1, &env_metric})
    for (const auto& [k, p] : *m)
      if (std::isnan(steps[k].ended_at)) steps[k].ended_at = p.wall_time;

  double cumulative = 0;
  std::map<int64_t, double> cum_at;  // cumulative env calls after each step
  for (auto& [k, s] : steps) {
    double calls = s.turns;
    if (calls == 0)
      if (auto it = env_metric.find(k); it != env_metric.end()) calls = it->second.value;
    cumulative += calls;
    cum_at[k] = cumulative;
    auto point = [&, k = k, &s = s](const std::string& name, double y) {
      if (!std::isnan(y) && !std::isnan(s.ended_at)) out.curves[name].push_back({k, (s.ended_at - t0) / 60.0, cumulative, y});
    };
    auto metric = [&](const std::map<int64_t, store::MetricPoint>& m) {
      auto it = m.find(k);
      return it == m.end() ? NAN : it->second.value;
    };
    const bool have_rollouts = s.rollouts > 0;
    point("train_acc@1", have_rollouts ? s.pass_turn1 / s.rollouts : metric(m_acc1));
    point("train_acc@T", have_rollouts ? s.passed / s.rollouts : metric(m_accT));
    point("reward_mean", metric(m_reward));
    if (s.passed > 0) point("first_success_turn", s.first_turn_sum / s.passed);
    if (s.passed > 0 && calls > 0) point("turns_per_pass", calls / s.passed);
    if (calls > 0) point("env_calls", calls);
    point("dcp_activated", s.groups > 0 ? s.activated / s.groups : metric(m_act));
  }
  // Evaluations: x from the step they follow (step 0: before any training, no env calls yet).
  auto cumulative_at = [&](int64_t step) {
    auto it = cum_at.upper_bound(step);
    return it == cum_at.begin() ? 0.0 : std::prev(it)->second;
  };
  const std::string accT = "eval/acc@" + std::to_string(std::max<int64_t>(run.turns, 1));
  for (const auto& [curve, metric] : {std::pair<std::string, std::string>{"eval_acc@1", "eval/acc@1"}, {"eval_acc@T", accT}})
    for (const auto& [k, p] : metric_by_step(st, id, metric))
      out.curves[curve].push_back({k, (p.wall_time - t0) / 60.0, cumulative_at(k), p.value});
  return out;
}

ArmCurve average_over_seeds(const std::vector<const RunCurves*>& runs, const std::string& curve, XAxis axis) {
  ArmCurve a;
  if (runs.empty()) return a;
  std::vector<std::map<int64_t, CurvePoint>> by_step;
  for (const RunCurves* r : runs) {
    auto it = r->curves.find(curve);
    if (it == r->curves.end() || it->second.empty()) return a;
    std::map<int64_t, CurvePoint> m;
    for (const auto& p : it->second) m[p.step] = p;
    by_step.push_back(std::move(m));
  }
  a.runs = static_cast<int64_t>(runs.size());
  for (const auto& [step, first] : by_step[0]) {
    std::vector<double> xs, ys;
    for (const auto& m : by_step) {
      auto it = m.find(step);
      if (it == m.end()) break;
      const CurvePoint& p = it->second;
      xs.push_back(axis == XAxis::step ? static_cast<double>(p.step) : axis == XAxis::wall_min ? p.wall_min : p.env_calls);
      ys.push_back(p.y);
    }
    if (ys.size() != by_step.size()) continue;  // a step some seed has not reached
    const MeanSpread x = mean_spread(xs), y = mean_spread(ys);
    a.x.push_back(x.mean);
    a.y.push_back(y.mean);
    const double se = std::isnan(y.se) ? 0.0 : y.se;
    a.lo.push_back(y.mean - se);
    a.hi.push_back(y.mean + se);
  }
  return a;
}

}  // namespace leap::report
