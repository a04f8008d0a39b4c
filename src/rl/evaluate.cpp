#include "rl/evaluate.hpp"

#include <cmath>

namespace leap::rl {

EvalSummary summarize_eval(const std::vector<GroupResult>& groups, int max_turns, const std::vector<double>& fast_p) {
  EvalSummary s;
  s.tasks = static_cast<int64_t>(groups.size());
  const int T = std::max(1, max_turns);
  s.acc_at.assign(static_cast<size_t>(T), 0.0);
  for (double p : fast_p) s.fast_p[p] = 0.0;
  int64_t pairs = 0, compiled = 0, solved_tasks = 0, n_speed = 0;
  double log_sum = 0;
  for (const auto& g : groups) {
    s.samples = std::max<int64_t>(s.samples, static_cast<int64_t>(g.rollouts.size()));
    bool any = false;
    for (const auto& ro : g.rollouts) {
      if (ro.infra_error()) continue;  // void: the environment failed, not the answer
      ++pairs;
      if (!ro.turns.empty()) {
        const auto v = ro.turns.front().result.verdict;
        if (v != env::Verdict::format_error && v != env::Verdict::compile_error) ++compiled;
      }
      const int k = ro.first_success();
      if (k > 0) {
        any = true;
        for (int t = k; t <= T; ++t) s.acc_at[static_cast<size_t>(t - 1)] += 1;
        const double sp = ro.turns[static_cast<size_t>(k - 1)].result.speedup;
        if (std::isfinite(sp) && sp > 0) {
          log_sum += std::log(sp);
          ++n_speed;
        }
        // fast_p judges the rollout's final correct solution.
        double final_sp = sp;
        for (const auto& t : ro.turns)
          if (t.result.is_correct()) final_sp = t.result.speedup;
        for (auto& [p, share] : s.fast_p)
          if (std::isfinite(final_sp) && final_sp > p) share += 1;
      }
    }
    if (any) ++solved_tasks;
  }
  const double n = static_cast<double>(std::max<int64_t>(1, pairs));
  for (auto& a : s.acc_at) a /= n;
  for (auto& [p, share] : s.fast_p) share /= n;
  s.compile_rate = static_cast<double>(compiled) / n;
  s.geomean_speedup = n_speed ? std::exp(log_sum / static_cast<double>(n_speed)) : std::nan("");
  s.pass_at_k = groups.empty() ? 0.0 : static_cast<double>(solved_tasks) / static_cast<double>(groups.size());
  return s;
}

std::map<std::string, double> eval_metrics(const EvalSummary& s) {
  std::map<std::string, double> m;
  for (size_t t = 0; t < s.acc_at.size(); ++t) m["eval/acc@" + std::to_string(t + 1)] = s.acc_at[t];
  auto it = s.fast_p.find(1.0);
  m["eval/fast_1"] = it == s.fast_p.end() ? std::nan("") : it->second;
  m["eval/geomean_speedup"] = s.geomean_speedup;
  m["eval/compile_rate"] = s.compile_rate;
  m["eval/pass@k"] = s.pass_at_k;
  return m;
}

}  // namespace leap::rl
