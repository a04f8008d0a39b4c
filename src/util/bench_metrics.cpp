#include "util/bench_metrics.hpp"

#include <algorithm>
#include <set>

#include "util/error.hpp"

namespace leap::metrics {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (k < 1) throw Error("pass@k: k must be >= 1, got " + std::to_string(k));
  if (c < 0 || c > n) throw Error("pass@k: " + std::to_string(c) + " correct of " + std::to_string(n) + " samples");
  if (n == 0 || k > n) return NAN;
  if (n - c < k) return 1.0;
  // 1 - prod_{i = n-c+1}^{n} (1 - k / i), numerically stable form of 1 - C(n-c, k) / C(n, k).
  double miss = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) miss *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - miss;
}

namespace {

struct Trajectory {
  int64_t first_correct = 0;  // 0: never
  double best_speedup = NAN;  // over correct attempts with a speedup
};

struct TaskData {
  std::optional<int64_t> level;
  std::map<int64_t, Trajectory> samples;
  std::vector<const Attempt*> attempts;
  int64_t infra_errors = 0;  // attempts of void trajectories that are infra_error
};

bool compiled(const std::string& v) { return v != "format_error" && v != "compile_error"; }

Metrics slice(const std::vector<const TaskData*>& tasks, int64_t T, int64_t max_samples, const std::vector<double>& fast_p) {
  Metrics m;
  m.tasks = static_cast<int64_t>(tasks.size());
  m.acc.assign(static_cast<size_t>(T), 0.0);
  for (double p : fast_p) m.fast_p[p] = 0.0;
  std::map<int64_t, std::pair<double, int64_t>> pass;  // k -> (sum, tasks)
  int64_t compiled_n = 0, correct_traj = 0, tokens = 0, turn_sum = 0, speed_n = 0;
  double log_sum = 0;
  m.hacks["inputs_modified"] = 0;
  m.hacks["suspicious_speedup"] = 0;
  for (const TaskData* t : tasks) {
    m.infra_errors += t->infra_errors;
    for (const Attempt* a : t->attempts) {
      ++m.attempts;
      compiled_n += compiled(a->verdict);
      tokens += a->tokens;
      if (a->verdict == "inputs_modified") ++m.hacks["inputs_modified"];
      if (a->suspicious) ++m.hacks["suspicious_speedup"];
    }
    const int64_t n = static_cast<int64_t>(t->samples.size());
    m.trajectories += n;
    if (n == 0) {  // no result: a failure, 0 in every share (pass@k included)
      for (int64_t k : std::set<int64_t>{1, max_samples}) ++pass[k].second;
      continue;
    }
    int64_t c = 0;
    std::vector<int64_t> by_turn(static_cast<size_t>(T), 0);
    std::map<double, int64_t> fast;
    for (const auto& [s, tr] : t->samples) {
      if (!tr.first_correct) continue;
      ++c;
      ++correct_traj;
      turn_sum += tr.first_correct;
      for (int64_t k = tr.first_correct; k <= T; ++k) ++by_turn[static_cast<size_t>(k - 1)];
      for (double p : fast_p)
        if (p == 0.0 || (!std::isnan(tr.best_speedup) && tr.best_speedup > p)) ++fast[p];
      if (!std::isnan(tr.best_speedup) && tr.best_speedup > 0) log_sum += std::log(tr.best_speedup), ++speed_n;
    }
    for (int64_t k = 0; k < T; ++k) m.acc[static_cast<size_t>(k)] += static_cast<double>(by_turn[static_cast<size_t>(k)]) / n;
    for (double p : fast_p) m.fast_p[p] += static_cast<double>(fast[p]) / n;
    for (int64_t k : std::set<int64_t>{1, max_samples}) {
      auto& [sum, cnt] = pass[k];
      // A task with fewer than k samples counts pass@n (any of its samples correct), a lower bound
      // of its pass@k: leaving it out made pass@2 fall below pass@1 when most tasks had one answer
      // and those without any counted 0 (leap eval --solutions on KernelBench: 0.046 -> 0.016).
      sum += pass_at_k(n, c, std::min(k, n)), ++cnt;
    }
  }
  if (m.tasks > 0) {
    for (auto& a : m.acc) a /= static_cast<double>(m.tasks);
    for (auto& [p, v] : m.fast_p) v /= static_cast<double>(m.tasks);
  } else {
    for (auto& a : m.acc) a = NAN;
    for (auto& [p, v] : m.fast_p) v = NAN;
  }
  for (const auto& [k, sc] : pass) m.pass_at_k[k] = sc.second ? sc.first / static_cast<double>(sc.second) : NAN;
  if (m.attempts) m.compile_rate = static_cast<double>(compiled_n) / static_cast<double>(m.attempts);
  if (speed_n) m.geomean_speedup = std::exp(log_sum / static_cast<double>(speed_n));
  if (correct_traj) {
    m.turns_per_pass = static_cast<double>(turn_sum) / static_cast<double>(correct_traj);
    if (tokens > 0) m.tokens_per_success = static_cast<double>(tokens) / static_cast<double>(correct_traj);  // 0: not counted
  }
  return m;
}

}  // namespace

MetricsReport compute_metrics(const MetricsInput& input) {
  std::map<std::string, TaskData> tasks;
  std::vector<std::string> order;
  for (const auto& t : input.tasks) {
    auto [it, fresh] = tasks.try_emplace(t.task);
    if (fresh) order.push_back(t.task);
    if (t.level) it->second.level = t.level;
  }
  int64_t T = std::max<int64_t>(1, input.turns);
  for (const auto& a : input.attempts) {
    if (a.turn < 1) throw Error("metrics: attempt of task '" + a.task + "' has turn " + std::to_string(a.turn) + " (turns are 1-based)");
    if (input.turns <= 0) T = std::max(T, a.turn);
  }
  std::set<std::pair<std::string, int64_t>> void_trajectories;  // (task, sample) with an infra_error
  for (const auto& a : input.attempts)
    if (a.verdict == "infra_error") void_trajectories.insert({a.task, a.sample});
  for (const auto& a : input.attempts) {
    auto [it, fresh] = tasks.try_emplace(a.task);
    if (fresh) order.push_back(a.task);
    TaskData& t = it->second;
    if (void_trajectories.count({a.task, a.sample})) {
      t.infra_errors += a.verdict == "infra_error";
      continue;
    }
    t.attempts.push_back(&a);
    Trajectory& tr = t.samples[a.sample];
    if (a.verdict == "correct" && a.turn <= T) {
      if (!tr.first_correct || a.turn < tr.first_correct) tr.first_correct = a.turn;
      if (a.speedup && (std::isnan(tr.best_speedup) || *a.speedup > tr.best_speedup)) tr.best_speedup = *a.speedup;
    }
  }
  MetricsReport r;
  r.turns = T;
  for (const auto& [n, t] : tasks) r.samples = std::max<int64_t>(r.samples, static_cast<int64_t>(t.samples.size()));
  std::vector<const TaskData*> all;
  std::map<std::string, std::vector<const TaskData*>> levels;
  for (const auto& n : order) {
    const TaskData& t = tasks.at(n);
    all.push_back(&t);
    levels[t.level ? std::to_string(*t.level) : "-"].push_back(&t);
  }
  const std::vector<double>& fast_p = input.fast_p.empty() ? kFastP : input.fast_p;
  r.overall = slice(all, T, r.samples, fast_p);
  for (const auto& [l, v] : levels) r.by_level[l] = slice(v, T, r.samples, fast_p);
  return r;
}

}  // namespace leap::metrics
