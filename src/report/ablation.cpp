#include "report/ablation.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "report/config_diff.hpp"

namespace leap::report {

namespace {

std::map<std::string, std::string> arm_key(const RunSummary& r) {
  std::map<std::string, std::string> k;
  for (const auto& [key, v] : r.config)
    if (!ignored_key(key)) k[key] = v;
  return k;
}

/// "mean" or "mean ± std" over the non-NaN values; "-" if none.
std::string agg(const std::vector<double>& v, int digits) {
  std::vector<double> x;
  for (double d : v)
    if (!std::isnan(d)) x.push_back(d);
  if (x.empty()) return "-";
  double mean = 0;
  for (double d : x) mean += d;
  mean /= static_cast<double>(x.size());
  if (x.size() == 1) return fmt_num(mean, digits);
  double ss = 0;
  for (double d : x) ss += (d - mean) * (d - mean);
  return fmt_num(mean, digits) + " ± " + fmt_num(std::sqrt(ss / static_cast<double>(x.size() - 1)), digits);
}

}  // namespace

std::vector<Arm> group_arms(const std::vector<RunSummary>& runs) {
  std::vector<Arm> arms;
  std::vector<std::map<std::string, std::string>> keys;
  for (const auto& r : runs) {
    auto k = arm_key(r);
    size_t i = 0;
    while (i < keys.size() && keys[i] != k) ++i;
    if (i == keys.size()) {
      keys.push_back(k);
      arms.emplace_back();
    }
    arms[i].runs.push_back(&r);
  }
  for (auto& a : arms)
    a.label = a.runs.size() == 1 ? a.runs[0]->run.name + " (" + a.runs[0]->run.id + ")"
                                 : a.runs[0]->run.name + " (" + std::to_string(a.runs.size()) + " seeds)";
  return arms;
}

Table ablation_table(const std::vector<RunSummary>& runs, double target) {
  Table t;
  t.title = "Ablation: one row per arm (runs differing only in seed are averaged: mean ± std)";
  std::vector<std::map<std::string, std::string>> configs;
  int64_t T = 0;
  for (const auto& r : runs) {
    configs.push_back(r.config);
    T = std::max<int64_t>(T, static_cast<int64_t>(r.eval_acc.size()));
  }
  std::vector<std::string> switches = differing_keys(configs);
  std::vector<Arm> arms = group_arms(runs);
  t.header = {"arm", "runs"};
  for (const auto& s : switches) t.header.push_back(s);
  using Get = std::function<double(const RunSummary&)>;
  std::vector<std::pair<std::string, std::pair<Get, int>>> cols;
  cols.push_back({"steps", {[](const RunSummary& r) { return static_cast<double>(r.steps); }, 0}});
  for (int64_t k = 1; k <= std::max<int64_t>(T, 1); ++k)
    cols.push_back({"eval_acc@" + std::to_string(k), {[k](const RunSummary& r) {
                      return static_cast<int64_t>(r.eval_acc.size()) >= k ? r.eval_acc[static_cast<size_t>(k - 1)] : NAN;
                    }, 3}});
  cols.push_back({"fast_1", {[](const RunSummary& r) { return r.eval_fast_1; }, 3}});
  cols.push_back({"geomean_speedup", {[](const RunSummary& r) { return r.eval_geomean_speedup; }, 3}});
  cols.push_back({"compile_rate", {[](const RunSummary& r) { return r.eval_compile_rate; }, 3}});
  cols.push_back({"activated_groups_%", {[](const RunSummary& r) { return r.activated_groups_pct; }, 1}});
  cols.push_back({"env_calls", {[](const RunSummary& r) { return r.env_calls; }, 0}});
  cols.push_back({"infra_errors", {[](const RunSummary& r) { return static_cast<double>(r.infra_errors); }, 0}});
  cols.push_back({"env_s/step", {[](const RunSummary& r) { return r.env_seconds; }, 2}});
  cols.push_back({"gen_s/step", {[](const RunSummary& r) { return r.generation_seconds; }, 2}});
  cols.push_back({"update_s/step", {[](const RunSummary& r) { return r.update_seconds; }, 2}});
  cols.push_back({"tokens/success", {[](const RunSummary& r) { return r.tokens_per_success; }, 1}});
  cols.push_back({"wall_s", {[](const RunSummary& r) { return r.wall_seconds; }, 1}});
  if (target > 0)
    cols.push_back({"s_to_acc@1>=" + fmt_num(target, 2), {[](const RunSummary& r) { return r.time_to_target_s; }, 1}});
  for (const auto& c : cols) t.header.push_back(c.first);
  for (const auto& a : arms) {
    std::vector<std::string> row = {a.label, std::to_string(a.runs.size())};
    for (const auto& s : switches) {
      auto it = a.runs[0]->config.find(s);
      row.push_back(it == a.runs[0]->config.end() ? "(unset)" : it->second);
    }
    for (const auto& c : cols) {
      std::vector<double> v;
      for (const RunSummary* r : a.runs) v.push_back(c.second.first(*r));
      row.push_back(agg(v, c.second.second));
    }
    t.rows.push_back(row);
  }
  return t;
}

Table curve_table(const std::string& run_id, const std::vector<CurveSummary>& curves) {
  Table t;
  t.title = "Run " + run_id + ": per-step curves";
  t.header = {"metric", "points", "first", "last", "min", "max", "last_10%_mean"};
  for (const auto& c : curves)
    t.rows.push_back({c.metric, std::to_string(c.points), fmt_num(c.first, 4), fmt_num(c.last, 4), fmt_num(c.min, 4),
                      fmt_num(c.max, 4), fmt_num(c.tail_mean, 4)});
  return t;
}

}  // namespace leap::report
