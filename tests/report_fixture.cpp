#include "report_fixture.hpp"

#include <algorithm>

namespace leap::test {

using namespace leap::store;

namespace {

TurnRecord make_turn(int64_t t, bool pass) {
  TurnRecord u;
  u.turn_index = t;
  u.node_index = t - 1;
  if (t > 1) u.parent_index = t - 2;
  u.prompt = "prompt";
  u.completion = "completion";
  u.completion_tokens = 20;
  u.verdict = pass ? "correct" : "wrong_output";
  u.speedup = pass ? std::optional<double>(1.5) : std::nullopt;
  u.reward = pass ? 1.0 : 0.0;
  u.discounted_return = u.reward;
  return u;
}

}  // namespace

std::string write_synthetic_run(Store& st, const SyntheticRun& r) {
  RunInfo info;
  info.id = r.id;
  info.name = r.name;
  info.config_yaml = "name: " + r.name + "\nreward:\n  kind: " + r.reward_kind + "\ndcp:\n  enabled: " +
                     (r.dcp ? "true" : "false") + "\nturns:\n  max: 2\ntrain:\n  seed: " + std::to_string(r.seed) + "\n";
  info.seed = r.seed;
  info.started_at = r.t0;
  st.create_run(info);
  auto eval_metrics = [](double acc1, double at) {  // stored with the evaluation's step
    return std::vector<MetricRecord>{{"eval/acc@1", acc1, at}, {"eval/acc@2", std::min(1.0, acc1 + 0.1), at}};
  };
  st.write_evaluation({r.id, 0, "synthetic", "{}", r.t0 + 5}, {}, eval_metrics(r.skill, r.t0 + 5));
  for (int64_t k = 1; k <= r.steps; ++k) {
    StepRecord s;
    s.run_id = r.id;
    s.step = k;
    s.started_at = r.t0 + 10 + 30.0 * static_cast<double>(k - 1);
    s.ended_at = s.started_at + 30;
    s.generation_seconds = 20;
    s.env_seconds = 6;
    s.update_seconds = 4;
    const double share = std::min(1.0, r.skill + 0.04 * static_cast<double>(k - 1));
    int turns = 0, pass1 = 0, pass_any = 0;
    for (int g = 0; g < 4; ++g) {
      GroupRecord gr;
      gr.group_index = g;
      gr.task = {"synthetic", "task" + std::to_string(g), 1, std::string("elementwise"), "h" + std::to_string(g)};
      gr.dcp_activated = r.dcp && g < 2;
      gr.fail_ratio_turn1 = 0.5;
      for (int o = 0; o < 4; ++o) {
        RolloutRecord ro;
        ro.rollout_index = o;
        const bool first = (g * 4 + o) < 16.0 * share;
        ro.turns = {make_turn(1, first)};
        if (first) ro.first_success_turn = 1;
        if (!first && gr.dcp_activated) {
          const bool second = o % 2 == 1;
          ro.turns.push_back(make_turn(2, second));
          if (second) ro.first_success_turn = 2;
        }
        ro.final_verdict = ro.turns.back().verdict;
        ro.reward = ro.first_success_turn ? 1.0 : 0.0;
        turns += static_cast<int>(ro.turns.size());
        pass1 += first;
        pass_any += ro.first_success_turn.has_value();
        gr.rollouts.push_back(ro);
      }
      s.groups.push_back(gr);
    }
    s.metrics = {{"reward_mean", r.reward_kind == "rank" ? 0.0 : pass_any / 16.0, s.ended_at},
                 {"train_acc@1", pass1 / 16.0, s.ended_at},
                 {"train_acc@T", pass_any / 16.0, s.ended_at},
                 {"env_calls", static_cast<double>(turns), s.ended_at},
                 {"loss", 1.0 / static_cast<double>(k), s.ended_at}};
    st.write_step(s);
  }
  const double end = r.t0 + 10 + 30.0 * r.steps;
  st.write_evaluation({r.id, r.steps, "synthetic", "{}", end + 5}, {},
                      eval_metrics(std::min(1.0, r.skill + 0.04 * r.steps), end + 5));
  st.finish_run(r.id, RunStatus::finished, end + 6);
  return r.id;
}

}  // namespace leap::test
