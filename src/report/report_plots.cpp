#include "report/report_plots.hpp"

#include <map>
#include <string>

#include "report/ablation.hpp"
#include "report/curves.hpp"

namespace leap::report {

namespace {

/// An arm with its runs' curves.
struct ArmCurves {
  std::string label;
  std::vector<const RunCurves*> runs;
  bool zero_sum_reward = false;  ///< reward.kind rank: the group's rewards sum to zero
};

/// An x-axis's file-name part and label (with units).
struct AxisText {
  const char* stem;
  const char* label;
};

AxisText axis_text(XAxis a) {
  switch (a) {
    case XAxis::step: return {"step", "training step"};
    case XAxis::wall_min: return {"time", "wall time since the run started (minutes)"};
    case XAxis::env_calls: return {"env_calls", "environment calls (training turns evaluated, cumulative)"};
  }
  return {"", ""};
}

Series series(const std::string& title, const ArmCurve& c, Series::Style style, int colour) {
  Series s{title, c.x, c.y, {}, {}, style, colour};
  if (c.runs > 1) s.lo = c.lo, s.hi = c.hi;
  return s;
}

std::string spread_note(const std::vector<ArmCurves>& arms) {
  for (const auto& a : arms)
    if (a.runs.size() > 1)
      return " Each arm's line is the mean over its seeds at each step (steps every seed reached), the band "
             "mean ± standard error over the seeds.";
  return "";
}

/// Training curve `train` (solid) and evaluation curve `eval` (dashed, squares) of every arm.
PlotSpec accuracy_plot(const std::vector<ArmCurves>& arms, const std::string& which, XAxis axis) {
  const bool at1 = which == "1";
  PlotSpec p;
  p.file = std::string(at1 ? "acc1" : "accT") + "_vs_" + axis_text(axis).stem + ".svg";
  p.title = std::string(at1 ? "Acc@1: train (the step's rollouts) and eval" : "Acc@T (pass rate at any turn): train and eval") +
            ", against " + (axis == XAxis::step ? "step" : axis == XAxis::wall_min ? "wall time" : "environment calls");
  p.xlabel = axis_text(axis).label;
  p.ylabel = at1 ? "Acc@1 (share correct at turn 1)" : "Acc@T (share correct at any turn)";
  p.yrange = std::make_pair(0.0, 1.0);
  for (size_t i = 0; i < arms.size(); ++i) {
    const int c = static_cast<int>(i);
    p.lines.push_back(series(arms[i].label + " train", average_over_seeds(arms[i].runs, "train_acc@" + std::string(at1 ? "1" : "T"), axis),
                             Series::Style::line, c));
    p.lines.push_back(series(arms[i].label + " eval", average_over_seeds(arms[i].runs, "eval_acc@" + std::string(at1 ? "1" : "T"), axis),
                             Series::Style::marked, c));
  }
  p.caption = std::string("Solid: share of the step's training rollouts correct ") + (at1 ? "at turn 1" : "at any turn") +
              "; dashed with squares: the evaluations (held-out split when tasks.eval_split is eval; step 0 is the "
              "policy before RL)" + (at1 ? std::string(".") : std::string(", T being each run's last eval turn.")) +
              spread_note(arms);
  return p;
}

/// One training curve of every arm (those `keep` accepts) against the step.
PlotSpec step_plot(const std::vector<ArmCurves>& arms, const std::string& curve, const std::string& file,
                   const std::string& title, const std::string& ylabel, const std::string& caption,
                   bool (*keep)(const ArmCurves&) = nullptr) {
  PlotSpec p{file, title, axis_text(XAxis::step).label, ylabel, {}, std::nullopt, caption + spread_note(arms)};
  for (size_t i = 0; i < arms.size(); ++i)
    if (!keep || keep(arms[i]))
      p.lines.push_back(series(arms[i].label, average_over_seeds(arms[i].runs, curve, XAxis::step), Series::Style::line,
                               static_cast<int>(i)));
  return p;
}

}  // namespace

std::vector<PlotSpec> report_plots(store::Store& st, const std::vector<RunSummary>& runs) {
  std::vector<RunCurves> curves;
  curves.reserve(runs.size());
  for (const auto& r : runs) curves.push_back(read_run_curves(st, r));
  std::vector<ArmCurves> arms;
  for (const Arm& a : group_arms(runs)) {
    ArmCurves ac;
    ac.label = a.label;
    for (const RunSummary* r : a.runs) ac.runs.push_back(&curves[static_cast<size_t>(r - runs.data())]);
    auto kind = a.runs[0]->config.find("reward.kind");
    ac.zero_sum_reward = kind != a.runs[0]->config.end() && kind->second == "rank";
    arms.push_back(std::move(ac));
  }
  std::vector<PlotSpec> plots;
  for (XAxis axis : {XAxis::step, XAxis::env_calls, XAxis::wall_min})
    for (const char* which : {"1", "T"}) plots.push_back(accuracy_plot(arms, which, axis));
  bool any_rank = false;
  for (const auto& a : arms) any_rank = any_rank || a.zero_sum_reward;
  plots.push_back(step_plot(arms, "reward_mean", "reward_vs_step.svg", "Mean reward per step", "reward (mean over the step's rollouts)",
                            any_rank ? "Arms with the rank reward are left out: it sums to zero in every group by "
                                       "construction, so its mean is zero; the pass rate (Acc@T), turn of first success "
                                       "and turns per pass show what changes."
                                     : "The mean over the step's rollouts of the rollout reward (reward.kind).",
                            [](const ArmCurves& a) { return !a.zero_sum_reward; }));
  plots.push_back(step_plot(arms, "first_success_turn", "first_success_turn_vs_step.svg",
                            "Turn of first success", "turn (mean over the step's passing rollouts)",
                            "The mean turn at which the step's passing rollouts first passed (1: at the first attempt)."));
  plots.push_back(step_plot(arms, "turns_per_pass", "turns_per_pass_vs_step.svg", "Environment calls per passing rollout",
                            "env calls / passing rollouts",
                            "The step's environment calls (turns evaluated) over its rollouts that passed at any turn: "
                            "what a success costs."));
  plots.push_back(step_plot(arms, "env_calls", "env_calls_vs_step.svg", "Environment calls per step",
                            "env calls (turns evaluated)", "Training turns evaluated per step (evaluations excluded)."));
  plots.push_back(step_plot(arms, "dcp_activated", "dcp_activation.svg", "DCP: share of groups expanded to debugging turns",
                            "activated groups (share of the step's groups)",
                            "Difficulty-Conditioned Pruning: the share of the step's groups whose failures got a next turn."));
  plots.back().yrange = std::make_pair(0.0, 1.0);
  return plots;
}

}  // namespace leap::report
