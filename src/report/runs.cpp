#include "report/runs.hpp"

#include "store/lease.hpp"

#include <algorithm>

#include "config/load.hpp"
#include "report/config_diff.hpp"
#include "util/bench_metrics.hpp"
#include "report/store_input.hpp"
#include "util/error.hpp"

namespace leap::report {

const std::vector<std::string>& curve_metrics() {
  static const std::vector<std::string> m = {
      "reward_mean",      "train_acc@1",     "train_acc@T",   "eval/acc@1",   "activated_groups_frac",
      "loss",             "grad_norm",       "entropy",       "kl",           "clip_frac_low",
      "clip_frac_high",   "response_tokens_mean", "zero_adv_groups", "env_calls", "env_calls_saved",
      "recovered",        "compaction_events", "generation_seconds", "env_seconds", "update_seconds"};
  return m;
}

namespace {

/// ORDER BY term putting the trainer's own evaluations (its eval split, whose settings name no
/// model) before those `leap eval --run` added later (settings with "model", possibly another
/// bench): an ad-hoc KernelBench evaluation once became the run's "final evaluation" in the table.
const std::string kTrainerFirst = "(json_extract(e.settings_json, '$.model') IS NOT NULL)";

double last_value(store::Store& st, const std::string& run, const std::string& name, std::optional<int64_t>* step = nullptr) {
  auto s = st.metric_series(run, name);
  for (auto it = s.rbegin(); it != s.rend(); ++it)
    if (!std::isnan(it->value)) {
      if (step) *step = it->step;
      return it->value;
    }
  return NAN;
}

}  // namespace

RunSummary summarize_run(store::Store& st, const std::string& run_id, double target) {
  RunSummary r;
  auto row = st.get_run(run_id);
  if (!row) throw StoreError("store " + st.path() + ": no run '" + run_id + "'");
  r.run = *row;
  r.config = flatten_yaml(r.run.config_yaml, "run " + run_id + " config_yaml");
  // A key this binary knows but the run's stored config lacks was added after the run: the run
  // behaved as its default (new keys default to the old behaviour), so it reads as that default
  // rather than making the run an arm of its own.
  static const auto defaults = flatten_yaml(config::to_yaml(config::Experiment{}), "the default config");
  for (const auto& [key, value] : defaults) r.config.emplace(key, value);
  if (r.run.status == store::RunStatus::running)
    if (const auto lease = st.get_lease(run_id))
      if (auto why = store::lease_stale_reason(*lease)) r.writer_gone = *why;
  auto& db = st.db();
  {
    store::Statement s = db.prepare(
        "SELECT count(*), avg(env_seconds), avg(generation_seconds), avg(update_seconds), max(ended_at) "
        "FROM steps WHERE run_id = ?1");
    s.bind_text(1, run_id);
    s.step();
    r.steps = s.column_int64(0);
    if (r.steps) {
      r.env_seconds = s.column_double(1);
      r.generation_seconds = s.column_double(2);
      r.update_seconds = s.column_double(3);
    }
    double end = r.run.ended_at.value_or(s.column_opt_double(4).value_or(NAN));
    r.wall_seconds = end - r.run.started_at;
  }
  // Debugging turns exist only with turns.max > 1: a single-turn run has no activated groups
  // to report (its groups' DCP flag says nothing), so the column stays empty ("-").
  bool multi_turn = true;
  if (auto it = r.config.find("turns.max"); it != r.config.end()) {
    try {
      multi_turn = std::stoll(it->second) > 1;
    } catch (const std::exception&) {
    }
  }
  if (multi_turn) {
    store::Statement s = db.prepare("SELECT count(*), sum(dcp_activated) FROM groups WHERE run_id = ?1");
    s.bind_text(1, run_id);
    s.step();
    if (s.column_int64(0)) r.activated_groups_pct = 100.0 * s.column_double(1) / s.column_double(0);
  }
  if (multi_turn && std::isnan(r.activated_groups_pct)) {  // no group rows: the trainer's per-step share
    double sum = 0;
    int n = 0;
    for (const auto& p : st.metric_series(run_id, "activated_groups_frac"))
      if (!std::isnan(p.value)) sum += p.value, ++n;
    if (n) r.activated_groups_pct = 100.0 * sum / n;
  }
  {
    // One pass over the run's turns: all of them, and those the environment failed on.
    store::Statement s = db.prepare(
        "SELECT count(*), coalesce(sum(u.verdict = 'infra_error'), 0) FROM turns u JOIN rollouts o "
        "ON o.id = u.rollout_id JOIN groups g ON g.id = o.group_id WHERE g.run_id = ?1");
    s.bind_text(1, run_id);
    s.step();
    r.env_calls = static_cast<double>(s.column_int64(0));
    r.infra_errors = s.column_int64(1);
    if (r.env_calls == 0) {  // no turn rows: the trainer's per-step counts
      double sum = 0;
      bool any = false;
      for (const auto& p : st.metric_series(run_id, "env_calls"))
        if (!std::isnan(p.value)) sum += p.value, any = true;
      r.env_calls = any ? sum : NAN;
    }
  }
  if (r.steps && !std::isnan(r.env_calls)) r.env_calls_per_step = r.env_calls / static_cast<double>(r.steps);
  if (r.steps) {
    metrics::MetricsInput in = train_input(db, run_id, 1, INT64_MAX);
    if (!in.attempts.empty()) r.tokens_per_success = metrics::compute_metrics(in).overall.tokens_per_success;
  }
  // Final eval: stored results first, then the trainer's eval metrics.
  {
    store::Statement s = db.prepare(
        "SELECT e.id, e.step FROM evaluations e WHERE e.run_id = ?1 AND EXISTS "
        "(SELECT 1 FROM eval_results x WHERE x.evaluation_id = e.id) ORDER BY " + kTrainerFirst +
        ", coalesce(e.step, 0) DESC, e.id DESC LIMIT 1");
    s.bind_text(1, run_id);
    if (s.step()) {
      r.eval_step = s.column_opt_int64(1);
      metrics::MetricsReport m = metrics::compute_metrics(eval_input(db, s.column_int64(0)));
      r.infra_errors += m.overall.infra_errors;
      r.turns = m.turns;
      r.eval_acc = m.overall.acc;
      r.eval_fast_1 = m.overall.fast_p.at(1.0);
      r.eval_geomean_speedup = m.overall.geomean_speedup;
      r.eval_compile_rate = m.overall.compile_rate;
      r.eval_turns_per_pass = m.overall.turns_per_pass;
    } else {
      for (int64_t t = 1;; ++t) {
        std::optional<int64_t> step;
        double v = last_value(st, run_id, "eval/acc@" + std::to_string(t), &step);
        if (std::isnan(v)) break;
        r.eval_acc.push_back(v);
        r.turns = t;
        if (t == 1) r.eval_step = step;
      }
      r.eval_fast_1 = last_value(st, run_id, "eval/fast_1");
      r.eval_geomean_speedup = last_value(st, run_id, "eval/geomean_speedup");
      r.eval_compile_rate = last_value(st, run_id, "eval/compile_rate");
    }
  }
  // A run that trained but whose only evaluation is the one before RL (interrupted or killed
  // before its next one) has no final evaluation: its step-0 figures were pooled into its arm's
  // final Acc@1 and speedup (a new user, 2026-12-08).
  if (r.steps > 0 && r.eval_step && *r.eval_step == 0) {
    r.eval_acc.clear();
    r.eval_step.reset();
    r.eval_fast_1 = r.eval_geomean_speedup = r.eval_compile_rate = r.eval_turns_per_pass = NAN;
  }
  // First eval (the policy before RL when the trainer evaluates at step 0).
  {
    store::Statement s = db.prepare(
        "SELECT e.id FROM evaluations e WHERE e.run_id = ?1 AND EXISTS "
        "(SELECT 1 FROM eval_results x WHERE x.evaluation_id = e.id) ORDER BY " + kTrainerFirst +
        ", coalesce(e.step, 0) ASC, e.id ASC LIMIT 1");
    s.bind_text(1, run_id);
    if (s.step()) {
      metrics::MetricsReport m = metrics::compute_metrics(eval_input(db, s.column_int64(0)));
      if (!m.overall.acc.empty()) r.eval_acc1_start = m.overall.acc[0];
    } else {
      for (const auto& p : st.metric_series(run_id, "eval/acc@1"))
        if (!std::isnan(p.value)) {
          r.eval_acc1_start = p.value;
          break;
        }
    }
  }
  if (target > 0)
    for (const auto& p : st.metric_series(run_id, "eval/acc@1"))
      if (!std::isnan(p.value) && p.value >= target) {
        r.time_to_target_s = p.wall_time - r.run.started_at;
        break;
      }
  return r;
}

std::vector<CurveSummary> summarize_curves(store::Store& st, const std::string& run_id) {
  std::vector<CurveSummary> out;
  for (const auto& name : curve_metrics()) {
    std::vector<double> v;
    for (const auto& p : st.metric_series(run_id, name))
      if (!std::isnan(p.value)) v.push_back(p.value);
    if (v.empty()) continue;
    CurveSummary c;
    c.metric = name;
    c.points = static_cast<int64_t>(v.size());
    c.first = v.front();
    c.last = v.back();
    c.min = *std::min_element(v.begin(), v.end());
    c.max = *std::max_element(v.begin(), v.end());
    size_t tail = std::max<size_t>(1, v.size() / 10);
    double sum = 0;
    for (size_t i = v.size() - tail; i < v.size(); ++i) sum += v[i];
    c.tail_mean = sum / static_cast<double>(tail);
    out.push_back(c);
  }
  return out;
}

std::vector<store::MetricPoint> first_series(store::Store& st, const std::string& run_id,
                                             const std::vector<std::string>& names) {
  for (const auto& n : names) {
    auto s = st.metric_series(run_id, n);
    s.erase(std::remove_if(s.begin(), s.end(), [](const auto& p) { return std::isnan(p.value); }), s.end());
    if (!s.empty()) return s;
  }
  return {};
}

}  // namespace leap::report
