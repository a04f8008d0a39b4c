// `leap train`: run an experiment from a YAML config.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <spdlog/spdlog.h>

#include "cli/commands.hpp"
#include "cli/device_info.hpp"
#include "cli/environment.hpp"
#include "config/load.hpp"
#include "dist/process_group.hpp"
#include "rl/grader.hpp"
#include "rl/trainer.hpp"
#include "store/store.hpp"

namespace leap::cli {

namespace {

/// Closes `db` and deletes its file (with SQLite's -wal and -shm files) when no table holds a row.
void remove_store_if_empty(std::unique_ptr<store::Store>& db, const std::string& path) {
  if (!db) return;
  try {
    for (const auto& [table, rows] : db->row_counts())
      if (rows > 0) return;
    db.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
  } catch (const std::exception&) {
    // Best effort: the error being reported matters more than the empty file.
  }
}

/// A resume runs the stored config: say so when CONFIG is another (a new user resumed with an
/// ablation's file, or one that does not exist, and read nothing about it).
void warn_if_config_differs(const std::string& path, const config::Experiment& stored, const std::string& run) {
  std::string why;
  try {
    const config::Experiment file = config::resolved(config::load_experiment(path, {}));
    if (config::to_yaml(file) != config::to_yaml(config::resolved(stored))) why = "differs from the run's stored config";
  } catch (const std::exception&) {
    why = "cannot be read";
  }
  if (!why.empty())
    spdlog::warn("--resume {}: {} {}; the stored config is used (CONFIG gives only its dist: keys to a resume)", run,
                 path, why);
}

}  // namespace

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
  auto* print = cmd->add_flag("--print-config", o->print_config, "print the resolved config as YAML and exit");
  cmd->add_flag("--annotate", o->annotate, "with --print-config: a comment describing each key")->needs(print);
  cmd->footer("Exit codes: 0 ok, 1 failure, 2 bad config or usage, 3 not built yet.\n"
              "Data parallel: run under torchrun (or any launcher setting RANK, WORLD_SIZE, LOCAL_RANK,\n"
              "MASTER_ADDR, MASTER_PORT), e.g. torchrun --no-python --nproc-per-node 8 leap train CONFIG;\n"
              "see docs/distributed.md.");
  return [o, &g]() -> int {
    config::Experiment exp;
    std::string source = o->config;
    // Data parallel when the launcher says so (WORLD_SIZE > 1); rank 0 alone opens the store.
    const dist::Rendezvous rdv = dist::rendezvous_from_env();
    std::unique_ptr<dist::ProcessGroup> group;
    if (!o->resume.empty()) {
      // Only the process-group keys may be given with --resume; anything else would be ignored.
      for (const auto& s : o->sets)
        if (s.rfind("dist.", 0) != 0)
          throw UsageError("--set " + s + ": a resumed run keeps its stored config; only dist.* keys may be "
                           "set with --resume (start a new run to change anything else)");
      // A resumed run keeps its stored config; --set and the config file are not applied (the
      // file's dist: keys set up the process group, then rank 0 sends the stored config).
      std::string yaml;
      std::string finished;  // rank 0: the message for a run that has already finished
      if (rdv.rank == 0) {
        if (!std::filesystem::exists(g.db)) throw UsageError("--resume: no store at " + g.db + " (give --db PATH)");
        store::Store db(g.db);
        auto row = db.get_run(o->resume);
        if (!row) throw UsageError("--resume: no run '" + o->resume + "' in " + g.db);
        yaml = row->config_yaml;
        if (row->status == store::RunStatus::finished && !o->print_config) {
          const auto ck = db.latest_checkpoint(row->id);
          finished = "run " + row->id + " has already finished (" +
                     std::to_string(db.last_completed_step(row->id).value_or(0)) + " steps" +
                     (ck ? ", checkpoint " + ck->path : std::string()) + "); nothing to resume, nothing changed\n" +
                     "next: leap report --db " + g.db + " --runs " + row->id + "\n";
          yaml.clear();  // tells the other ranks (data parallel) to stop too
        }
      }
      if (rdv.world_size > 1 && !o->print_config) {
        const auto file = config::load_experiment(o->config, o->sets);
        const bool cuda = file.model.device == "cuda" || (file.model.device == "auto" && torch::cuda::is_available());
        group = dist::ProcessGroup::create(rdv, dist::resolve_backend(file.dist.backend, cuda), file.dist.timeout_s);
        yaml = group->broadcast_bytes(yaml, 0);
      }
      if (yaml.empty()) {  // a finished run: a no-op, exit 0
        std::cout << finished;
        return 0;
      }
      exp = config::parse_experiment(yaml, "run " + o->resume + " (stored config)");
      warn_if_config_differs(o->config, exp, o->resume);
      // What a message about its folders names: the stored config, whose relative paths are read
      // from the folder leap runs in (not CONFIG, which a resume does not read).
      source = "run " + o->resume + " (stored config; relative paths from " + std::filesystem::current_path().string() + ")";
    } else {
      exp = config::load_experiment(o->config, o->sets);
    }
    if (o->print_config) {
      if (rdv.rank == 0) std::cout << config::to_yaml(exp, o->annotate);
      return 0;
    }
    // The folders a run reads, checked before anything (the store, the compile cache) is created.
    config::require_input_folders(exp, source);
    const bool cuda = exp.model.device == "cuda" || (exp.model.device == "auto" && torch::cuda::is_available());
    if (rdv.world_size > 1 && !group)
      group = dist::ProcessGroup::create(rdv, dist::resolve_backend(exp.dist.backend, cuda), exp.dist.timeout_s);
    // Each rank's environment workers use the rank's GPU (LOCAL_RANK).
    auto environment = make_environment(with_cache_root(exp.env, g.results_dir), exp.env.backend, rdv.local_rank);
    check_compiler(*environment, exp.env.backend);  // settings under which nothing compiles: exit 2 now
    rl::VerifierGrader grader(*environment->verifier, static_cast<int>(std::max<int64_t>(1, exp.env.workers)));
    std::unique_ptr<store::Store> db;
    const bool new_store = rdv.rank == 0 && !std::filesystem::exists(g.db);
    if (rdv.rank == 0) db = std::make_unique<store::Store>(g.db);
    rl::TrainContext ctx;
    ctx.store = db.get();
    ctx.group = group.get();
    ctx.grader = &grader;
    ctx.results_dir = g.results_dir;
    ctx.config_path = source;
    if (!o->resume.empty()) ctx.resume_run_id = o->resume;
    ctx.progress = exp.logging.progress && rdv.rank == 0;
    if (rdv.rank == 0) ctx.device_info = describe_devices(exp, cuda, rdv.local_rank);
    rl::TrainSummary s;
    try {
      s = rl::train(exp, ctx);
    } catch (...) {
      // A run that failed before it wrote anything (a model that does not load, say) leaves no
      // empty store behind when this command created it.
      if (new_store) remove_store_if_empty(db, g.db);
      throw;
    }
    if (rdv.rank != 0) return 0;  // rank 0 prints the summary
    if (s.already_finished) {
      std::cout << "run " << s.run_id << " has already finished (" << s.steps
                << " steps); nothing to resume, nothing changed\n";
      return 0;
    }
    // A resume after the last step (only the final evaluation was left) ran no training step.
    const bool trained = s.first_step <= s.steps;
    auto fig = [](double v) { return v == v ? fmt::format("{:.3f}", v) : std::string("n/a"); };
    auto steps_label = [&](int64_t from) {  // "steps 1-2" (a window), "step 7" (one step)
      return s.window > 1 ? fmt::format("steps {}-{}", from, from + s.window - 1) : fmt::format("step {}", from);
    };
    // "step 1: 0.06   step 2: 0.72", or one figure when the first and the last window are one.
    auto first_last = [&](double first, double last) {
      const int64_t last_from = s.steps - s.window + 1;
      if (last_from <= s.first_step) return steps_label(s.first_step) + ": " + fig(last);
      return steps_label(s.first_step) + ": " + fig(first) + "   " + steps_label(last_from) + ": " + fig(last);
    };
    const std::string untrained = o->resume.empty()
        ? "  training           no step (train.steps: 0): only the evaluation ran\n"
        : "  training           all " + std::to_string(s.steps) +
              " steps were done before this resume; it completed the final evaluation\n";
    // After a resume the seconds are this process's: say which steps they cover.
    const std::string took =
        o->resume.empty() ? " steps in " + fmt::format("{:.0f}", s.seconds) + " s"
        : trained ? fmt::format(" steps; this resume ran {} in {:.0f} s",
                                s.first_step == s.steps ? fmt::format("step {}", s.steps)
                                                        : fmt::format("steps {}-{}", s.first_step, s.steps),
                                s.seconds)
                  : fmt::format(" steps; this resume ran the final evaluation in {:.0f} s", s.seconds);
    std::cout << "\nrun " << s.run_id << " finished: " << s.steps << took << "\n"
              << (!trained ? untrained
                  : exp.reward.kind == "rank"
                      ? std::string("  mean reward        0 in every group by construction (rank reward: (wins - "
                                    "losses) / (G - 1))\n")
                      : "  mean reward        " + first_last(s.reward_first, s.reward_last) + "\n")
              << (trained ? "  train acc@1        " + first_last(s.train_acc1_first, s.train_acc1_last) + "\n"
                          : std::string())
              << "  eval acc@1         start: " << fig(s.acc1_start) << "   end: " << fig(s.acc1_end) << "   ("
              << exp.tasks.eval_split << " split, temperature " << exp.eval.temperature << ")\n"
              << "  eval acc@" << exp.eval.turns << "         start: " << fig(s.accT_start) << "   end: " << fig(s.accT_end)
              << "\n"
              << "  store              " << g.db << "\n"
              << "  checkpoint         " << s.checkpoint << "\n"
              << "next: leap report --db " << g.db << " --runs " << s.run_id << "\n";
    return 0;
  };
}

}  // namespace leap::cli
