// `leap eval`: score a model, a run's checkpoint or saved solutions on a benchmark.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/validators.hpp"
#include "cli/environment.hpp"
#include "cli/eval_model.hpp"
#include "env/extract.hpp"
#include "config/load.hpp"
#include "util/bench_metrics.hpp"
#include "report/metrics_table.hpp"
#include "store/store.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"

namespace leap::cli {

namespace {

namespace fs = std::filesystem;

/// An answer file's text (env::read_answer_file), a read failure as a usage error.
std::string read_answer(const fs::path& p) {
  try {
    return env::read_answer_file(p.string());
  } catch (const std::runtime_error& e) {
    throw UsageError(std::string("leap eval: ") + e.what());
  }
}

std::vector<fs::path> md_files(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (e.is_regular_file() && e.path().extension() == ".md" && n.rfind(prefix, 0) == 0) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string num_or_dash(double v, const char* fmt) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, fmt, v);
  return b;
}

/// The settings `leap eval --model/--run` samples and grades with: CONFIG (--config) when given;
/// else, for --run, the run's stored config (its chat format, knowledge base, compaction,
/// sampling and env settings, as its own evaluations used them); else the defaults. --set
/// applies on top in every case. Throws UsageError for an unknown run, ConfigError for a bad key.
config::Experiment eval_experiment(const std::string& config_path, const std::vector<std::string>& sets,
                                   const std::string& run, const std::string& db_path) {
  if (!config_path.empty() || run.empty()) return experiment_from_flags(config_path, sets);
  if (!fs::exists(db_path)) throw UsageError("leap eval --run: no store at " + db_path + " (give --db PATH)");
  store::Store db(db_path);
  const auto row = db.get_run(run);
  if (!row) throw UsageError("leap eval --run: no run '" + run + "' in " + db_path);
  spdlog::info("leap eval --run {}: sampling and grading with the run's stored config (--config CONFIG to use another)",
               run);
  return config::parse_experiment(row->config_yaml, "run " + run + " (stored config)", sets);
}

/// `leap eval --solutions`: grades saved answer files and records them as an evaluation.
int eval_solutions(const std::string& tasks_dir, const std::string& solutions_dir, const std::string& backend,
                   const std::string& format, const config::Experiment& exp, const GlobalOptions& g, bool full_size) {
  const std::string& db = g.db;
  tasks::TaskSet set = tasks::load_task_set(tasks_dir);
  if (!fs::is_directory(solutions_dir)) throw UsageError("leap eval: --solutions " + solutions_dir + " is not a folder");
  // Layout: <solutions>/<task>/<any>.md, or (a task-set folder) <task>/solutions/<backend>_*.md.
  std::vector<std::pair<const tasks::TaskSpec*, fs::path>> files;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(solutions_dir))
    if (e.is_directory()) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& d : dirs) {
    const std::string name = d.filename().string();
    const tasks::TaskSpec* t = set.find(name);
    bool task_folder = fs::exists(d / "task.yaml");
    std::vector<fs::path> found = task_folder ? md_files(d / "solutions", backend + "_") : md_files(d, "");
    if (found.empty()) continue;
    if (!t) throw UsageError("leap eval: " + d.string() + " holds answers but the task set " + tasks_dir + " has no task '" + name + "'");
    for (auto& f : found) files.emplace_back(t, f);
  }
  if (files.empty())
    throw UsageError("leap eval: no answer files under " + solutions_dir +
                     " (expected <dir>/<task>/<name>.md, or <task>/solutions/" + backend + "_*.md in a task-set folder)");

  auto envp = make_environment(with_cache_root(exp.env, g.results_dir), backend);
  check_compiler(*envp, backend);  // settings under which nothing compiles: exit 2 now
  std::map<std::string, std::unique_ptr<env::RuntimeTask>> runtime;
  std::vector<GradeJob> jobs;
  for (const auto& [t, f] : files) {
    auto& rt = runtime[t->name];
    if (!rt) {
      tasks::TaskSpec spec = *t;  // a task without sizes for this backend is refused unless --full-size
      if (full_size) spec.allow_full_size(backend);
      rt = std::make_unique<env::RuntimeTask>(spec, backend);
    }
    jobs.push_back({rt.get(), f.string(), read_answer(f)});
  }
  std::vector<env::EvalResult> results = grade_all(*envp->verifier, jobs, static_cast<int>(exp.env.workers));

  // Store.
  store::Store st(db);
  nlohmann::json settings = {{"backend", backend},
                             // absolute: the store outlives the folder the command ran in
                             {"solutions", fs::absolute(solutions_dir).lexically_normal().string()},
                             {"tasks", fs::absolute(tasks_dir).lexically_normal().string()},
                             {"seeds", exp.env.seeds},
                             {"timing", {{"warmup", exp.env.timing.warmup}, {"trials", exp.env.timing.trials},
                                         {"max_seconds", exp.env.timing.max_seconds}}},
                             {"cpu_threads", exp.env.cpu.threads}};
  store::EvaluationInfo info;
  info.bench = set.name;
  // Text from outside (paths, answers, feedback) may hold invalid UTF-8: replaced (U+FFFD) in JSON.
  info.settings_json = settings.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::vector<store::EvalResultRecord> recs;
  std::map<std::string, int64_t> sample_of;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const auto& spec = jobs[i].task->spec();
    store::EvalResultRecord r;
    r.task = {set.name, spec.name, spec.level, spec.category.empty() ? std::nullopt : std::optional(spec.category), spec.hash};
    r.sample = sample_of[spec.name]++;
    r.turn = 1;
    r.verdict = std::string(env::to_string(results[i].verdict));
    auto opt = [](double v) { return std::isnan(v) ? std::nullopt : std::optional<double>(v); };
    r.speedup = opt(results[i].speedup);
    r.candidate_ms = opt(results[i].candidate_ms);
    r.reference_ms = opt(results[i].reference_ms);
    r.file = jobs[i].file;
    r.suspicious = results[i].suspicious;
    recs.push_back(r);
  }
  // The evaluation row and its results in one transaction: whole or not at all.
  const int64_t eval_id = st.write_evaluation(info, recs);

  // Benchmark metrics over every task of the set (a task without an answer counts as a failure).
  metrics::MetricsInput mi;
  for (const auto& t : set.tasks) mi.tasks.push_back({t.name, t.level});
  for (size_t i = 0; i < jobs.size(); ++i)
    mi.attempts.push_back({jobs[i].task->name(), recs[i].sample, 1, recs[i].verdict, recs[i].speedup, 0,
                            results[i].suspicious});
  mi.turns = 1;
  const metrics::MetricsReport bench = metrics::compute_metrics(mi);

  std::map<std::string, int> counts;
  double log_sum = 0;
  int n_correct = 0, n_suspicious = 0;
  for (const auto& r : results) {
    counts[std::string(env::to_string(r.verdict))]++;
    if (r.is_correct() && r.speedup > 0) log_sum += std::log(r.speedup), ++n_correct;
    n_suspicious += r.suspicious;
  }
  if (format == "json") {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < jobs.size(); ++i) {
      const auto& r = results[i];
      auto num = [](double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); };
      rows.push_back({{"task", jobs[i].task->name()}, {"file", jobs[i].file}, {"verdict", env::to_string(r.verdict)},
                      {"speedup", num(r.speedup)}, {"candidate_ms", num(r.candidate_ms)},
                      {"reference_ms", num(r.reference_ms)},
                      {"reference_device", r.details.count("reference_device") ? nlohmann::json(r.details.at("reference_device"))
                                                                              : nlohmann::json(nullptr)},
                      {"suspicious", r.suspicious}, {"feedback", r.feedback},
                      {"details", r.details}});  // what the environment measured besides (docs/env.md)
    }
    nlohmann::json out = {{"evaluation_id", eval_id}, {"bench", set.name}, {"backend", backend}, {"results", rows},
                          {"counts", counts}, {"metrics", report::metrics_json(bench)}};
    std::cout << out.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    size_t wt = 4, wf = 4;
    for (const auto& j : jobs) {
      wt = std::max(wt, j.task->name().size());
      wf = std::max(wf, fs::path(j.file).filename().string().size());
    }
    std::printf("%-*s  %-*s  %-15s  %9s  %10s  %10s\n", int(wt), "task", int(wf), "file", "verdict", "speedup", "cand_ms",
                "ref_ms");
    for (size_t i = 0; i < jobs.size(); ++i) {
      const auto& r = results[i];
      std::string sp = num_or_dash(r.speedup, "%.2fx") + (r.suspicious ? "!" : "");
      std::printf("%-*s  %-*s  %-15s  %9s  %10s  %10s\n", int(wt), jobs[i].task->name().c_str(), int(wf),
                  fs::path(jobs[i].file).filename().string().c_str(), std::string(env::to_string(r.verdict)).c_str(),
                  sp.c_str(), num_or_dash(r.candidate_ms, "%.4f").c_str(), num_or_dash(r.reference_ms, "%.4f").c_str());
    }
    std::string summary;
    for (const auto& [k, v] : counts) summary += (summary.empty() ? "" : ", ") + std::to_string(v) + " " + k;
    std::printf("\n%zu files: %s", jobs.size(), summary.c_str());
    if (n_correct) std::printf("; geometric-mean speedup of correct: %.3fx", std::exp(log_sum / n_correct));
    if (n_suspicious) std::printf("; %d suspicious (!)", n_suspicious);
    std::printf("\n\n%s", report::render_text(report::metrics_table(bench)).c_str());
    std::printf("(over all %zu tasks of %s; a task without an answer counts as a failure)\n", set.tasks.size(),
                set.name.c_str());
    std::printf("evaluation %lld written to %s\n", static_cast<long long>(eval_id), db.c_str());
  }
  return 0;
}

}  // namespace

Handler add_eval(CLI::App& app, const GlobalOptions& g) {
  auto* cmd = app.add_subcommand("eval", "Score a model, a run's checkpoint or saved solutions: correctness, "
                                         "speedup, fast_p, Acc@k per turn");
  struct Opts {
    std::string config, tasks, solutions;
    std::vector<std::string> sets;
    ModelEvalArgs m;  ///< what --model / --run evaluate with (the flags bind into it)
  };
  auto o = std::make_shared<Opts>();
  ModelEvalArgs& m = o->m;
  m.backend = "cpu";
  cmd->add_option("--config", o->config, "experiment YAML for sampling and environment settings");
  cmd->add_option("--set", o->sets, "override one config key (repeatable)")->type_name("KEY.PATH=VALUE");
  cmd->add_option("--bench", m.bench, "kernelbench, starter, or a task-set folder");
  cmd->add_option("--tasks", o->tasks, "task-set folder (the same as --bench DIR)");
  cmd->add_option("--solutions", o->solutions, "score saved answers laid out as <dir>/<task>/<name>.md");
  cmd->add_option("--model", m.model, "Hugging Face checkpoint folder to sample from");
  cmd->add_option("--run", m.run, "evaluate run RUN_ID's checkpoint");
  cmd->add_option("--checkpoint", m.checkpoint, "checkpoint step of --run (default: the last)")->check(CLI::NonNegativeNumber);
  cmd->add_option("--turns", m.turns, "turns per rollout (default: eval.turns)")->check(CLI::Range(int64_t{1}, int64_t{64}));
  cmd->add_option("--samples", m.samples, "samples per task, k of pass@k (default: eval.samples)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  cmd->add_option("--levels", m.levels, "comma-separated levels to keep, e.g. 1,2");
  cmd->add_option("--split", m.split, "only the tasks of this split of the set (train, eval, ...; default: all)");
  cmd->add_option("--limit", m.limit, "at most this many tasks")->check(CLI::NonNegativeNumber);
  cmd->add_option("--backend", m.backend, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd->add_option("--format", m.format, "table or json")->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  cmd->add_flag("--full-size", m.full_size,
               "run tasks without sizes for the backend (sizes_cpu: none: imported for the GPU only) at their full "
               "sizes instead of leaving them out");
  cmd->add_option("--save-answers", m.save_answers,
                  "with --model/--run: save every answer to a new folder as <task>/s<sample>_t<turn>.md");
  return [o, &g]() -> int {
    ModelEvalArgs m = o->m;
    if (m.bench.empty() && o->tasks.empty()) throw UsageError("leap eval: give --bench NAME or --tasks DIR");
    if (!m.bench.empty() && !o->tasks.empty())
      throw UsageError("leap eval: give one of --bench NAME and --tasks DIR (--tasks DIR is --bench DIR)");
    // --bench NAME|DIR and --tasks DIR name the same thing: a task-set folder.
    const std::string tasks_dir = o->tasks.empty() ? bench_dir(m.bench) : o->tasks;
    if (m.bench.empty()) m.bench = o->tasks;
    int sources = !o->solutions.empty() + !m.model.empty() + !m.run.empty();
    if (sources != 1) throw UsageError("leap eval: give exactly one of --solutions DIR, --model PATH, --run RUN_ID");
    if (!o->config.empty()) config::load_experiment(o->config, o->sets);  // validates, exit 2 on errors
    if (!o->solutions.empty()) {
      if (!m.save_answers.empty()) throw UsageError("leap eval: --save-answers goes with --model or --run");
      // Flags of sampling and task selection mean nothing for saved answers: refused, not ignored.
      for (const auto& [flag, set] : {std::pair<const char*, bool>{"--limit", m.limit > 0}, {"--turns", m.turns > 0},
                                      {"--samples", m.samples > 0}, {"--levels", !m.levels.empty()},
                                      {"--split", !m.split.empty()}, {"--checkpoint", m.checkpoint >= 0}})
        if (set) throw UsageError(std::string("leap eval: ") + flag + " goes with --model or --run (--solutions grades every answer file given)");
      return eval_solutions(tasks_dir, o->solutions, m.backend, m.format, experiment_from_flags(o->config, o->sets), g,
                            m.full_size);
    }
    return eval_model(m, eval_experiment(o->config, o->sets, m.run, g.db), g);
  };
}

}  // namespace leap::cli
