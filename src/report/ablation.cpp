#include "report/ablation.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>

#include "report/config_diff.hpp"

namespace leap::report {

namespace {

std::map<std::string, std::string> arm_key(const RunSummary& r) {
  std::map<std::string, std::string> k;
  for (const auto& [key, v] : r.config)
    if (!ignored_key(key)) k[key] = v;
  return k;
}

/// The non-NaN values of `v`.
std::vector<double> finite(const std::vector<double>& v) {
  std::vector<double> x;
  for (double d : v)
    if (!std::isnan(d)) x.push_back(d);
  return x;
}

}  // namespace

MeanSpread mean_spread(const std::vector<double>& values) {
  MeanSpread m;
  const std::vector<double> x = finite(values);
  m.n = static_cast<int64_t>(x.size());
  if (x.empty()) return m;
  double sum = 0;
  for (double d : x) sum += d;
  m.mean = sum / static_cast<double>(x.size());
  if (x.size() < 2) return m;
  double ss = 0;
  for (double d : x) ss += (d - m.mean) * (d - m.mean);
  m.std = std::sqrt(ss / static_cast<double>(x.size() - 1));
  m.se = m.std / std::sqrt(static_cast<double>(x.size()));
  return m;
}

std::string format_mean_spread(const std::vector<double>& values, int digits) {
  const MeanSpread m = mean_spread(values);
  if (m.n == 0) return "-";
  std::string s = fmt_num(m.mean, digits);
  if (m.n > 1) s += " ± " + fmt_num(m.se, digits);
  return s;
}

namespace {

std::string agg(const std::vector<double>& v, int digits) { return format_mean_spread(v, digits); }

}  // namespace

std::string arm_label(const Arm& a) {
  // Runs that have not finished (running, interrupted, failed) are pooled like the others (a
  // report may be read while runs write), but the label says so; a seed run twice is not two.
  std::set<int64_t> seeds;
  std::map<std::string, int> unfinished;
  for (const RunSummary* r : a.runs) {
    seeds.insert(r->run.seed);
    // A `running` run whose writer is gone was killed without a chance to mark it (SIGKILL, the
    // OOM killer): it is not running, and `leap train --resume` takes it over.
    if (!r->writer_gone.empty())
      ++unfinished["stopped (writer gone)"];
    else if (r->run.status != store::RunStatus::finished)
      ++unfinished[std::string(store::to_string(r->run.status))];
  }
  std::string label = a.runs[0]->run.name + " (";
  if (a.runs.size() == 1) {
    label += a.runs[0]->run.id;
  } else if (seeds.size() == a.runs.size()) {
    label += std::to_string(a.runs.size()) + " seeds";
  } else {
    label += std::to_string(a.runs.size()) + " runs, " + std::to_string(seeds.size()) + (seeds.size() == 1 ? " seed" : " seeds");
  }
  for (const auto& [status, n] : unfinished)
    label += a.runs.size() == 1 ? ", " + status : ", " + std::to_string(n) + " " + status;
  return label + ")";
}

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
  for (auto& a : arms) a.label = arm_label(a);
  // Arms of one name (an ablation made with --set dcp.enabled=false, say) were labelled alike in
  // every table and plot legend (a new user, 2026-12-07): such a label names the switches that
  // differ between them, "quickstart [dcp.enabled=false] (2 seeds)", up to three.
  std::map<std::string, std::vector<size_t>> by_name;
  for (size_t i = 0; i < arms.size(); ++i) by_name[arms[i].runs[0]->run.name].push_back(i);
  for (const auto& [name, members] : by_name) {
    if (members.size() < 2) continue;
    std::vector<std::map<std::string, std::string>> configs;
    for (size_t i : members) configs.push_back(keys[i]);
    const std::vector<std::string> differ = differing_keys(configs);
    for (size_t i : members) {
      std::string switches;
      for (size_t k = 0; k < differ.size() && k < 3; ++k) {
        const auto it = keys[i].find(differ[k]);
        switches += (k ? ", " : "") + differ[k] + "=" + (it == keys[i].end() ? std::string("-") : it->second);
      }
      if (differ.size() > 3) switches += ", ...";
      arms[i].label = name + " [" + switches + "]" + arms[i].label.substr(name.size());
    }
  }
  return arms;
}

namespace {

/// The target as given (0.655 stays 0.655; 0.5 is "0.50"): at least 2 decimals, at most 6.
std::string target_label(double target) {
  for (int d = 2; d < 6; ++d)
    if (std::fabs(std::stod(fmt_num(target, d)) - target) < 1e-12) return fmt_num(target, d);
  return fmt_num(target, 6);
}

}  // namespace

Table ablation_table(const std::vector<RunSummary>& runs, double target) {
  Table t;
  t.title = "Ablation: one row per arm (runs differing only in name and seeds); cells: mean ± standard error over the arm's runs";
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
  cols.push_back({"eval_acc@1_start", {[](const RunSummary& r) { return r.eval_acc1_start; }, 3}});
  for (int64_t k = 1; k <= std::max<int64_t>(T, 1); ++k)
    cols.push_back({"eval_acc@" + std::to_string(k), {[k](const RunSummary& r) {
                      return static_cast<int64_t>(r.eval_acc.size()) >= k ? r.eval_acc[static_cast<size_t>(k - 1)] : NAN;
                    }, 3}});
  cols.push_back({"turns/pass", {[](const RunSummary& r) { return r.eval_turns_per_pass; }, 2}});
  cols.push_back({"fast_1", {[](const RunSummary& r) { return r.eval_fast_1; }, 3}});
  cols.push_back({"geomean_speedup", {[](const RunSummary& r) { return r.eval_geomean_speedup; }, 3}});
  cols.push_back({"compile_rate", {[](const RunSummary& r) { return r.eval_compile_rate; }, 3}});
  cols.push_back({"activated_groups_%", {[](const RunSummary& r) { return r.activated_groups_pct; }, 1}});
  cols.push_back({"env_calls", {[](const RunSummary& r) { return r.env_calls; }, 0}});
  cols.push_back({"infra_errors", {[](const RunSummary& r) { return static_cast<double>(r.infra_errors); }, 0}});
  cols.push_back({"env_calls/step", {[](const RunSummary& r) { return r.env_calls_per_step; }, 1}});
  cols.push_back({"env_s/step", {[](const RunSummary& r) { return r.env_seconds; }, 2}});
  cols.push_back({"gen_s/step", {[](const RunSummary& r) { return r.generation_seconds; }, 2}});
  cols.push_back({"update_s/step", {[](const RunSummary& r) { return r.update_seconds; }, 2}});
  cols.push_back({"tokens/success", {[](const RunSummary& r) { return r.tokens_per_success; }, 1}});
  cols.push_back({"wall_s", {[](const RunSummary& r) { return r.wall_seconds; }, 1}});
  if (target > 0)
    cols.push_back({"s_to_acc@1>=" + target_label(target), {[](const RunSummary& r) { return r.time_to_target_s; }, 1}});
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
      std::string cell = agg(v, c.second.second);
      // Seeds that never reached the target have no time: say how many did.
      if (target > 0 && c.first.rfind("s_to_acc@1", 0) == 0 && a.runs.size() > 1) {
        const int64_t reached = mean_spread(v).n;
        if (reached < static_cast<int64_t>(a.runs.size()))
          cell += " (" + std::to_string(reached) + "/" + std::to_string(a.runs.size()) + " reached)";
      }
      row.push_back(cell);
    }
    t.rows.push_back(row);
  }
  return t;
}

std::vector<Table> split_ablation_table(const Table& wide) {
  auto is_accuracy = [](const std::string& h) {
    return h == "steps" || h == "turns/pass" || h.rfind("eval_acc@", 0) == 0;
  };
  auto is_kernels = [](const std::string& h) {
    return h == "fast_1" || h == "geomean_speedup" || h == "compile_rate" || h == "infra_errors";
  };
  auto is_time = [](const std::string& h) {
    return h == "env_s/step" || h == "gen_s/step" || h == "update_s/step" || h == "wall_s" || h.rfind("s_to_", 0) == 0;
  };
  size_t first_metric = wide.header.size();  // columns before "steps": arm, runs, switches
  for (size_t c = 0; c < wide.header.size(); ++c)
    if (wide.header[c] == "steps") {
      first_metric = c;
      break;
    }
  std::vector<Table> parts(5);
  parts[0].title = wide.title + " (1/5: arms and the switches that differ)";
  parts[0].wrap = true;  // config values (model paths) may be long
  parts[1].title = "Accuracy (2/5): final evaluation; eval_acc@1_start is the first evaluation (before RL)";
  parts[2].title = "Kernels (3/5): final evaluation";
  parts[3].title = "Environment calls (4/5): training turns evaluated, DCP activation, tokens per success";
  parts[4].title = "Time (5/5): seconds per step, wall time, time to the target";
  std::vector<std::vector<size_t>> cols(parts.size(), std::vector<size_t>{0});
  for (size_t c = 1; c < wide.header.size(); ++c) {
    const std::string& h = wide.header[c];
    const size_t part = c < first_metric ? 0 : is_accuracy(h) ? 1 : is_kernels(h) ? 2 : is_time(h) ? 4 : 3;
    cols[part].push_back(c);
  }
  for (size_t k = 0; k < parts.size(); ++k) {
    for (size_t c : cols[k]) parts[k].header.push_back(wide.header[c]);
    for (const auto& row : wide.rows) {
      std::vector<std::string> r;
      for (size_t c : cols[k]) r.push_back(c < row.size() ? row[c] : "");
      parts[k].rows.push_back(std::move(r));
    }
  }
  return parts;
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
