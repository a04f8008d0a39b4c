// One step's counters (docs/training.md "Metrics").
#include "rl/step_counters.hpp"

#include <cmath>

#include "dist/process_group.hpp"
#include "rl/advantage.hpp"

namespace leap::rl {

namespace {

/// Calls f on every summed field, in one fixed order (the all-reduce's layout).
template <class C, class F>
void each_sum(C& c, F&& f) {
  f(c.groups), f(c.rollouts), f(c.infra_errors), f(c.turn1_correct), f(c.final_correct), f(c.zero_adv_groups);
  f(c.activated_groups), f(c.recovered), f(c.turns), f(c.samples), f(c.env_calls), f(c.env_calls_saved);
  f(c.compaction_events), f(c.compaction_tokens_saved), f(c.reward_sum), f(c.binary_sum), f(c.response_tokens);
}

}  // namespace

void StepCounters::all_reduce(dist::ProcessGroup& group) {
  std::vector<double> v;
  each_sum(*this, [&](const auto& x) { v.push_back(static_cast<double>(x)); });
  const auto sum = group.all_reduce_sum(v);
  size_t k = 0;
  each_sum(*this, [&](auto& x) {
    using T = std::remove_reference_t<decltype(x)>;
    if constexpr (std::is_integral_v<T>) x = static_cast<T>(std::llround(sum[k++]));
    else x = sum[k++];
  });
  const auto mx = group.all_reduce_max({generation_seconds, env_seconds});
  generation_seconds = mx[0], env_seconds = mx[1];
}

StepCounters count_step(const std::vector<GroupResult>& groups, const std::vector<std::vector<ScoredRollout>>& scored,
                        const std::vector<bool>& trained, int64_t samples, const EngineStats& es) {
  StepCounters c;
  c.groups = static_cast<int64_t>(groups.size());
  c.samples = samples;
  c.env_calls = es.env_calls, c.env_calls_saved = es.env_calls_saved;
  c.compaction_events = es.compaction_events, c.compaction_tokens_saved = es.tokens_saved;
  c.generation_seconds = es.generation_seconds, c.env_seconds = es.env_seconds;
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<double> adv;
    for (const auto& s : scored[g]) adv.insert(adv.end(), s.turn_advantages.begin(), s.turn_advantages.end());
    c.zero_adv_groups += all_zero(adv) ? 1 : 0;
    c.activated_groups += groups[g].dcp.expand ? 1 : 0;
    c.recovered += groups[g].recovered;
    for (size_t i = 0; i < groups[g].rollouts.size(); ++i) {
      const auto& ro = groups[g].rollouts[i];
      if (ro.infra_error()) {  // void: neither in the means nor in the accuracies
        c.infra_errors += 1;
        continue;
      }
      c.reward_sum += scored[g][i].reward;
      c.binary_sum += scored[g][i].reward_binary;
      c.rollouts += 1;
      c.turn1_correct += !ro.turns.empty() && ro.turns.front().result.is_correct() ? 1 : 0;
      c.final_correct += ro.first_success() > 0 ? 1 : 0;
      if (!trained[g]) continue;
      for (const auto& t : ro.turns) c.response_tokens += static_cast<double>(t.sample.completion_ids.size());
      c.turns += static_cast<int64_t>(ro.turns.size());
    }
  }
  return c;
}

}  // namespace leap::rl
