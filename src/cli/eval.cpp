// `leap eval`: score a model, a run's checkpoint or saved solutions on a benchmark.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "config/load.hpp"
#include "util/error.hpp"

namespace leap::cli {

Handler add_eval(CLI::App& app, const GlobalOptions& g) {
  auto* cmd = app.add_subcommand("eval", "Score a model, a run's checkpoint or saved solutions: correctness, "
                                         "speedup, fast_p, Acc@k per turn");
  struct Opts {
    std::string config, bench, tasks, solutions, model, run, backend = "cpu", format = "table", levels;
    std::vector<std::string> sets;
    int64_t checkpoint = -1, turns = 0, samples = 0, limit = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--config", o->config, "experiment YAML for sampling and environment settings");
  cmd->add_option("--set", o->sets, "override one config key (repeatable)")->type_name("KEY.PATH=VALUE");
  cmd->add_option("--bench", o->bench, "kernelbench, starter, or a task-set folder");
  cmd->add_option("--tasks", o->tasks, "task-set folder (with --solutions)");
  cmd->add_option("--solutions", o->solutions, "score saved answers laid out as <dir>/<task>/<name>.md");
  cmd->add_option("--model", o->model, "Hugging Face checkpoint folder to sample from");
  cmd->add_option("--run", o->run, "evaluate run RUN_ID's checkpoint");
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint step of --run (default: the last)");
  cmd->add_option("--turns", o->turns, "turns per rollout (default: eval.turns)");
  cmd->add_option("--samples", o->samples, "samples per task, k of pass@k (default: eval.samples)");
  cmd->add_option("--levels", o->levels, "comma-separated levels to keep, e.g. 1,2");
  cmd->add_option("--limit", o->limit, "at most this many tasks");
  cmd->add_option("--backend", o->backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--format", o->format, "table or json")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  return [o, &g]() -> int {
    if (o->bench.empty() && o->tasks.empty()) throw UsageError("leap eval: give --bench NAME or --tasks DIR");
    int sources = !o->solutions.empty() + !o->model.empty() + !o->run.empty();
    if (sources != 1) throw UsageError("leap eval: give exactly one of --solutions DIR, --model PATH, --run RUN_ID");
    if (!o->config.empty()) config::load_experiment(o->config, o->sets);  // validates, exit 2 on errors
    if (!o->solutions.empty())
      not_built("leap eval --solutions", "Kernel environment I: task sets, solution format, honest verifier");
    not_built("leap eval with a model", "KernelBench import, leap eval --bench, and leap report");
  };
}

}  // namespace leap::cli
