// `leap train`: run an experiment from a YAML config.
#include <CLI/CLI.hpp>

#include <iostream>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "cli/environment.hpp"
#include "config/load.hpp"
#include "rl/grader.hpp"
#include "rl/trainer.hpp"
#include "store/store.hpp"

namespace leap::cli {

Handler add_train(CLI::App& app, const GlobalOptions& g) {
  auto* cmd = app.add_subcommand("train", "Run GRPO training of an experiment config (multi-turn rollouts, "
                                          "DCP, rank reward, compaction)");
  struct Opts {
    std::string config;
    std::vector<std::string> sets;
    std::string resume;
    bool print_config = false;
    bool annotate = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("config", o->config, "experiment YAML (see configs/reference.yaml)")->required();
  cmd->add_option("--set", o->sets, "override one key, e.g. --set dcp.enabled=false (repeatable)")
      ->type_name("KEY.PATH=VALUE");
  cmd->add_option("--resume", o->resume, "continue run RUN_ID from its last checkpoint");
  cmd->add_flag("--print-config", o->print_config, "print the resolved config as YAML and exit");
  cmd->add_flag("--annotate", o->annotate, "with --print-config: a comment describing each key");
  cmd->footer("Exit codes: 0 ok, 1 failure, 2 bad config or usage, 3 not built yet.");
  return [o, &g]() -> int {
    config::Experiment exp;
    std::string source = o->config;
    if (!o->resume.empty()) {
      // A resumed run keeps its stored config; --set and the config file are not applied.
      store::Store db(g.db);
      auto row = db.get_run(o->resume);
      if (!row) throw UsageError("--resume: no run '" + o->resume + "' in " + g.db);
      exp = config::parse_experiment(row->config_yaml, "run " + o->resume + " (stored config)");
      source = o->config;
    } else {
      exp = config::load_experiment(o->config, o->sets);
    }
    if (o->print_config) {
      std::cout << config::to_yaml(exp, o->annotate);
      return 0;
    }
    auto environment = make_environment(exp.env, exp.env.backend);
    rl::VerifierGrader grader(*environment->verifier, static_cast<int>(std::max<int64_t>(1, exp.env.workers)));
    store::Store db(g.db);
    rl::TrainContext ctx;
    ctx.store = &db;
    ctx.grader = &grader;
    ctx.results_dir = g.results_dir;
    ctx.config_path = source;
    if (!o->resume.empty()) ctx.resume_run_id = o->resume;
    ctx.progress = exp.logging.progress;
    const auto s = rl::train(exp, ctx);
    auto fig = [](double v) { return v == v ? fmt::format("{:.3f}", v) : std::string("n/a"); };
    std::cout << "\nrun " << s.run_id << " finished: " << s.steps << " steps in " << fmt::format("{:.0f}", s.seconds)
              << " s\n"
              << "  mean reward        step " << s.first_step << ": " << fig(s.reward_first) << "   step " << s.steps
              << ": " << fig(s.reward_last) << "\n"
              << "  train acc@1        step " << s.first_step << ": " << fig(s.train_acc1_first) << "   step "
              << s.steps << ": " << fig(s.train_acc1_last) << "\n"
              << "  eval acc@1         start: " << fig(s.acc1_start) << "   end: " << fig(s.acc1_end) << "\n"
              << "  eval acc@" << exp.eval.turns << "         start: " << fig(s.accT_start) << "   end: " << fig(s.accT_end)
              << "\n"
              << "  store              " << g.db << "\n"
              << "  checkpoint         " << s.checkpoint << "\n"
              << "next: leap report --db " << g.db << " --runs " << s.run_id << "\n";
    return 0;
  };
}

}  // namespace leap::cli
