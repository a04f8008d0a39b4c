#include "cli/eval_model.hpp"

#include "model/chat_template.hpp"

#include <torch/torch.h>

#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <spdlog/spdlog.h>

#include "cli/environment.hpp"
#include "env/task_runtime.hpp"
#include "model/chat_format.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "util/bench_metrics.hpp"
#include "report/metrics_table.hpp"
#include "rl/evaluate.hpp"
#include "rl/grader.hpp"
#include "rl/local_policy.hpp"
#include "rl/rollout.hpp"
#include "rl/step_record.hpp"
#include "store/database.hpp"
#include "store/statement.hpp"
#include "store/store.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace leap::cli {

namespace fs = std::filesystem;

std::string bench_dir(const std::string& bench) {
  if (fs::is_directory(bench)) return bench;
  for (const fs::path& base : {fs::path("tasks"), fs::path(LEAP_SOURCE_DIR) / "tasks"})
    if (fs::is_directory(base / bench)) return (base / bench).string();
  if (bench == "kernelbench")
    throw UsageError("leap eval --bench kernelbench: no tasks/kernelbench; import it first with "
                     "`leap tasks import kernelbench KB_DIR --out tasks/kernelbench`");
  throw UsageError("leap eval --bench " + bench + ": not a task-set folder, and no tasks/" + bench);
}

namespace {

std::vector<int64_t> parse_levels(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty()) continue;
    try {
      out.push_back(std::stoll(item));
    } catch (const std::exception&) {
      throw UsageError("leap eval --levels: '" + item + "' is not a level number");
    }
  }
  return out;
}

}  // namespace

int eval_model(const ModelEvalArgs& a, config::Experiment exp, const GlobalOptions& g) {
  // --run reads a run from an existing store: none is created for it (as --resume and report).
  if (!a.run.empty() && !std::filesystem::exists(g.db))
    throw UsageError("leap eval --run: no store at " + g.db + " (give --db PATH)");
  store::Store db(g.db);
  std::string model_dir = a.model;
  std::optional<std::string> run_id;
  std::optional<int64_t> run_step;  // the evaluated checkpoint's step (evaluations.step)
  if (!a.run.empty()) {
    if (!db.get_run(a.run)) throw UsageError("leap eval --run: no run '" + a.run + "' in " + g.db);
    run_id = a.run;
    std::optional<store::CheckpointRow> ck;
    if (a.checkpoint >= 0) {
      auto st = db.db().prepare("SELECT path FROM checkpoints WHERE run_id = ?1 AND step = ?2 ORDER BY id DESC LIMIT 1");
      st.bind_text(1, a.run).bind_int64(2, a.checkpoint);
      if (!st.step()) throw UsageError("leap eval --run " + a.run + ": no checkpoint at step " + std::to_string(a.checkpoint));
      model_dir = st.column_text(0);
      run_step = a.checkpoint;
    } else {
      ck = db.latest_checkpoint(a.run);
      if (!ck) throw UsageError("leap eval --run " + a.run + ": the run has no checkpoint yet");
      model_dir = ck->path;
      run_step = ck->step;
    }
  }
  if (!fs::exists(fs::path(model_dir) / "config.json"))
    throw UsageError("leap eval: " + model_dir + " is not a Hugging Face checkpoint folder (no config.json)");
  const std::string dir = bench_dir(a.bench);
  const auto set = tasks::load_task_set(dir);
  const auto levels = parse_levels(a.levels);
  const std::string backend = a.backend.empty() ? exp.env.backend : a.backend;
  std::vector<std::unique_ptr<env::RuntimeTask>> owned;
  std::vector<const env::RuntimeTask*> tasks;
  size_t not_here = 0;
  for (auto spec : set.tasks) {
    if (a.full_size) spec.allow_full_size(backend);
    if (!spec.runs_on(backend)) {  // e.g. imported for the GPU only
      ++not_here;
      continue;
    }
    if (!levels.empty() && (!spec.level || std::find(levels.begin(), levels.end(), *spec.level) == levels.end())) continue;
    if (!a.split.empty() && a.split != "all" && set.split_of(spec.name) != a.split) continue;
    if (a.limit > 0 && static_cast<int64_t>(tasks.size()) >= a.limit) break;
    owned.push_back(std::make_unique<env::RuntimeTask>(spec, backend));
    tasks.push_back(owned.back().get());
  }
  if (not_here)
    std::printf("leap eval: %zu of the %zu tasks of %s have no %s sizes (imported for the GPU only) and are left out; "
                "--full-size runs them at their full sizes\n",
                not_here, set.tasks.size(), dir.c_str(), backend.c_str());
  if (tasks.empty()) throw UsageError("leap eval: no task of " + dir + " matches --levels/--split/--limit on the " + backend + " backend");
  if (!a.save_answers.empty()) util::require_new_folder(a.save_answers, "leap eval: --save-answers");

  const bool cuda = exp.model.device == "cuda" || (exp.model.device == "auto" && torch::cuda::is_available());
  const torch::Device device = cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  if (!cuda && exp.model.cpu_threads > 0) at::set_num_threads(static_cast<int>(exp.model.cpu_threads));
  const auto dtype = cuda && exp.model.dtype != "fp32" ? torch::kBFloat16 : torch::kFloat32;
  auto tok = model::Tokenizer::from_file(model_dir);
  auto m = model::load_transformer(model_dir, dtype, device);
  model::check_tokenizer_fits(tok, m->config().vocab_size, model_dir);
  const auto fmt = model::resolve_chat_format(model::parse_chat_format(exp.model.chat_format),
                                              m->config().model_type_name, tok);
  rl::LocalPolicy policy(m, tok, fmt, 64, model::checkpoint_chat_template(model_dir, fmt).default_system);
  auto environment = make_environment(with_cache_root(exp.env, g.results_dir), backend);
  check_compiler(*environment, backend);  // settings under which nothing compiles: exit 2 now
  rl::VerifierGrader grader(*environment->verifier, static_cast<int>(std::max<int64_t>(1, exp.env.workers)));

  rl::EngineOptions o;
  o.backend = backend;
  o.sampling.temperature = exp.eval.temperature;
  o.sampling.top_p = exp.rollout.top_p;
  o.sampling.top_k = exp.rollout.top_k;
  o.sampling.max_new_tokens = exp.rollout.max_new_tokens;
  o.max_turns = static_cast<int>(a.turns > 0 ? a.turns : exp.eval.turns);
  o.dcp.enabled = false;  // every failure is debugged
  o.compaction = exp.compaction.enabled;
  o.max_prompt_tokens = exp.compaction.max_prompt_tokens;
  o.compaction_strategy = exp.compaction.strategy;
  o.summary_max_tokens = exp.compaction.summary_max_tokens;
  // The knowledge base of the run's config (or of --set kb.dir=...), as the trainer's evaluations use it.
  if (!exp.kb.dir.empty()) {
    if (!fs::is_directory(exp.kb.dir))
      throw ConfigError("leap eval: key 'kb.dir': no knowledge-base folder '" + exp.kb.dir + "'");
    o.kb = std::make_shared<const rl::KnowledgeBase>(rl::KnowledgeBase::load(exp.kb.dir));
    o.kb_options.prompt = exp.kb.where != "feedback";
    o.kb_options.feedback = exp.kb.where != "prompt";
    o.kb_options.max_tokens = exp.kb.max_tokens;
    spdlog::info("knowledge base {}: {} snippets, {} for the {} backend ({})", exp.kb.dir, o.kb->snippets().size(),
                 o.kb->count_for_backend(backend), backend, exp.kb.where);
  }
  const int k = static_cast<int>(a.samples > 0 ? a.samples : exp.eval.samples);
  rl::RolloutEngine engine(policy, grader, o);
  rl::EngineStats es;
  spdlog::info("evaluating {} on {} tasks of {} ({} samples, up to {} turns, {} backend)", model_dir, tasks.size(), dir,
               k, o.max_turns, backend);
  const auto groups = engine.run(tasks, k, static_cast<uint64_t>(exp.train.seed), &es);

  store::EvaluationInfo info;
  info.run_id = run_id;
  info.step = run_step;
  info.bench = set.name;
  nlohmann::json settings = {{"model", model_dir}, {"turns", o.max_turns}, {"samples", k},
                             {"temperature", o.sampling.temperature}, {"max_new_tokens", o.sampling.max_new_tokens},
                             {"backend", backend}, {"profile_feedback", exp.env.profile_feedback}};
  if (o.kb)
    settings["kb"] = {{"dir", exp.kb.dir}, {"where", exp.kb.where}, {"max_tokens", exp.kb.max_tokens},
                      {"sha256", o.kb->hash()}};
  info.settings_json = settings.dump();
  std::vector<std::pair<std::string, std::string>> answers;  // --save-answers: (path in the folder, text)
  const std::vector<store::EvalResultRecord> records =
      rl::eval_result_records(groups, tasks, set.name, a.save_answers, a.save_answers.empty() ? nullptr : &answers);
  // The answers first (a new folder, whole or not at all), then the evaluation in one transaction.
  if (!a.save_answers.empty()) util::write_new_folder(a.save_answers, answers, "leap eval: --save-answers");
  int64_t eval_id = 0;
  try {
    eval_id = db.write_evaluation(info, records);
  } catch (...) {
    if (!a.save_answers.empty()) util::remove_tree(a.save_answers);  // no answers without their rows
    throw;
  }

  // Benchmark metrics per level and overall (util/bench_metrics.hpp; the same as `leap eval --solutions`).
  const metrics::MetricsInput mi = rl::metrics_input(groups, tasks, o.max_turns);
  const metrics::MetricsReport bench = metrics::compute_metrics(mi);
  if (a.format == "json") {
    nlohmann::json js = {{"evaluation_id", eval_id}, {"bench", set.name}, {"model", model_dir},
                         {"metrics", report::metrics_json(bench)}};
    std::cout << js.dump(2) << "\n";
  } else {
    std::cout << "evaluation " << eval_id << " (" << set.name << ", " << k << " samples, " << o.max_turns
              << " turns, model " << model_dir << ")\n\n"
              << report::render_text(report::metrics_table(bench)) << "\nstored in " << g.db
              << " (evaluations.id = " << eval_id << ")\n";
  }
  return 0;
}

}  // namespace leap::cli
