#include "rl/evaluate.hpp"

#include <algorithm>
#include <cmath>

#include "rl/step_record.hpp"

namespace leap::rl {

metrics::MetricsInput metrics_input(const std::vector<GroupResult>& groups,
                                    const std::vector<const env::RuntimeTask*>& tasks, int max_turns,
                                    const std::vector<double>& fast_p) {
  metrics::MetricsInput mi;
  for (const auto* t : tasks) mi.tasks.push_back({t->spec().name, t->spec().level});
  for (const auto& g : groups) {
    const std::string& name = tasks.at(g.task_index)->spec().name;
    for (size_t i = 0; i < g.rollouts.size(); ++i)
      for (const auto& t : g.rollouts[i].turns)
        mi.attempts.push_back({name, static_cast<int64_t>(i), t.turn, std::string(env::to_string(t.result.verdict)),
                               finite_or_empty(t.result.speedup), static_cast<int64_t>(t.sample.completion_ids.size()),
                               t.result.suspicious});
  }
  mi.turns = std::max(1, max_turns);
  mi.fast_p = fast_p;
  return mi;
}

EvalSummary summarize_eval(const std::vector<GroupResult>& groups, const std::vector<const env::RuntimeTask*>& tasks,
                           int max_turns, const std::vector<double>& fast_p) {
  const metrics::MetricsReport r = metrics::compute_metrics(metrics_input(groups, tasks, max_turns, fast_p));
  const metrics::Metrics& m = r.overall;
  EvalSummary s;
  s.tasks = m.tasks;
  s.samples = r.samples;
  s.acc_at = m.acc;
  s.fast_p = m.fast_p;
  s.compile_rate = m.compile_rate;
  s.geomean_speedup = m.geomean_speedup;
  const auto k = m.pass_at_k.find(r.samples);
  s.pass_at_k = k == m.pass_at_k.end() ? std::nan("") : k->second;
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
