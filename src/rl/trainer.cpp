#include "rl/trainer.hpp"

#include "rl/crash_guard.hpp"
#include "util/fatal.hpp"

#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <array>
#include <deque>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <spdlog/spdlog.h>

#include "config/load.hpp"
#include "dist/process_group.hpp"
#include "env/task_runtime.hpp"
#include "model/chat_format.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "rl/advantage.hpp"
#include "rl/checkpoint.hpp"
#include "rl/evaluate.hpp"
#include "rl/grader.hpp"
#include "rl/local_policy.hpp"
#include "rl/mutants.hpp"
#include "rl/prompts.hpp"
#include "rl/scoring.hpp"
#include "rl/step_record.hpp"
#include "rl/update.hpp"
#include "store/clock.hpp"
#include "store/records_json.hpp"
#include "store/store.hpp"
#include "tasks/task_spec.hpp"
#include "util/build_info.hpp"
#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/hash.hpp"
#include "util/log.hpp"
#include "util/process_info.hpp"

namespace leap::rl {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

/// A lease from another host not refreshed for this long is stale (docs/training.md).
constexpr double kLeaseStaleSeconds = 2 * 3600.0;

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  g_interrupted = true;
  util::note_interrupt();  // a reference that never returns cannot block the stop (env/reference.hpp)
}

/// Installs the SIGINT/SIGTERM handler for the life of a training call.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted = false;
    prev_int_ = std::signal(SIGINT, on_sigint);
    prev_term_ = std::signal(SIGTERM, on_sigint);
  }
  ~InterruptGuard() {
    std::signal(SIGINT, prev_int_);
    std::signal(SIGTERM, prev_term_);
  }

 private:
  void (*prev_int_)(int) = nullptr;
  void (*prev_term_)(int) = nullptr;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string hostname() { return util::host_name(); }

/// This process as a run's lease holder.
store::RunLease my_lease() {
  store::RunLease l;
  l.host = hostname();
  l.pid = static_cast<int64_t>(getpid());
  l.process_started_at = util::process_start_time(getpid()).value_or(0);
  return l;
}

/// Why the lease `l` of another process is stale (its holder is gone), or nullopt while it holds.
/// On this host: the pid does not run, or runs a process started at another time (a reused pid).
/// From another host: not refreshed for kLeaseStaleSeconds.
std::optional<std::string> lease_stale_reason(const store::RunLease& l) {
  if (l.host == hostname()) {
    const auto started = util::process_start_time(static_cast<long>(l.pid));
    if (!started) return fmt::format("pid {} is not running on this host", l.pid);
    if (std::abs(*started - l.process_started_at) > 1.0)
      return fmt::format("pid {} is now another process (it started {:.0f} s after the lease's holder)", l.pid,
                         *started - l.process_started_at);
    return std::nullopt;
  }
  const double age = store::unix_now() - l.refreshed_at;
  if (age > kLeaseStaleSeconds)
    return fmt::format("the lease of host {} was last refreshed {:.0f} s ago (stale after {:.0f} s)", l.host, age,
                       kLeaseStaleSeconds);
  return std::nullopt;
}

/// Throws when the run's log file could not be written (a full disk): the run must not go on unlogged.
void check_log_file(const std::string& path) {
  if (auto e = util::log_file_error(path); !e.empty()) throw Error(e);
}

/// The tasks of one split, prepared for the backend.
struct SplitTasks {
  std::vector<std::unique_ptr<env::RuntimeTask>> owned;
  std::vector<const env::RuntimeTask*> tasks;
};

SplitTasks load_split(const tasks::TaskSet& set, const config::Experiment& exp, const std::string& split) {
  SplitTasks out;
  for (const tasks::TaskSpec* spec : set.split(split)) {
    if (!exp.tasks.levels.empty()) {
      if (!spec->level) continue;
      if (std::find(exp.tasks.levels.begin(), exp.tasks.levels.end(), *spec->level) == exp.tasks.levels.end()) continue;
    }
    if (exp.tasks.limit > 0 && static_cast<int64_t>(out.owned.size()) >= exp.tasks.limit) break;
    out.owned.push_back(std::make_unique<env::RuntimeTask>(*spec, exp.env.backend));
    out.tasks.push_back(out.owned.back().get());
  }
  return out;
}

/// Tasks of step `step` (1-based): consecutive slices of per-epoch permutations of the split.
std::vector<const env::RuntimeTask*> step_tasks(const std::vector<const env::RuntimeTask*>& pool, int64_t step,
                                                int64_t per_step, uint64_t seed) {
  std::vector<const env::RuntimeTask*> out;
  const int64_t n = static_cast<int64_t>(pool.size());
  std::vector<size_t> perm;
  int64_t perm_epoch = -1;
  for (int64_t pos = (step - 1) * per_step; pos < step * per_step; ++pos) {
    if (pos / n != perm_epoch) {  // one seeded shuffle per epoch over the split
      perm_epoch = pos / n;
      perm.resize(pool.size());
      std::iota(perm.begin(), perm.end(), 0);
      std::mt19937_64 rng(util::mix_seed(seed, static_cast<uint64_t>(perm_epoch) + 17));
      std::shuffle(perm.begin(), perm.end(), rng);
    }
    out.push_back(pool[perm[static_cast<size_t>(pos % n)]]);
  }
  return out;
}

double lr_at(const config::OptimConfig& o, double base, int64_t step, int64_t total) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps)
    return base * static_cast<double>(step) / static_cast<double>(o.warmup_steps);
  if (o.schedule == "cosine") {
    const double span = static_cast<double>(std::max<int64_t>(1, total - o.warmup_steps));
    const double progress = std::clamp(static_cast<double>(step - o.warmup_steps) / span, 0.0, 1.0);
    return base * 0.5 * (1.0 + std::cos(M_PI * progress));
  }
  return base;
}

void set_lr(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
}

/// The shipped solutions of `spec` for `backend` (solutions/<backend>_*.md), sorted.
std::vector<std::string> shipped_solutions(const tasks::TaskSpec& spec, const std::string& backend) {
  std::vector<std::string> out;
  const fs::path dir = fs::path(spec.dir) / "solutions";
  if (!fs::is_directory(dir)) return out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(backend + "_", 0) == 0 && e.path().extension() == ".md") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

/// Everything a run holds.
struct Run {
  const config::Experiment& exp;
  const TrainContext& ctx;
  store::Store* db;                ///< null on data-parallel ranks other than 0
  dist::ProcessGroup* pg = nullptr;  ///< data-parallel group or null
  int rank = 0, world = 1;
  uint64_t rank_seed = 0;          ///< train.seed on rank 0, a mix of it and the rank elsewhere
  std::string run_id;
  fs::path run_dir;
  tasks::TaskSet set;
  SplitTasks train, eval;
  torch::Device device = torch::kCPU;
  std::unique_ptr<model::Tokenizer> tok;
  model::Transformer model{nullptr};
  model::Transformer reference{nullptr};
  std::unique_ptr<LocalPolicy> policy;
  std::vector<at::Tensor> params;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  UpdateOptions update;
  std::string checkpoint;
  int64_t checkpoint_step = -1;     ///< step of `checkpoint` written by this process (-1: none)
  store::RunLease lease;            ///< this process as the run's writer (rank 0)
  std::string log_path;             ///< results/<run>/train.log

  Run(const config::Experiment& e, const TrainContext& c)
      : exp(e), ctx(c), db(c.store), pg(c.group), rank(c.group ? c.group->rank() : 0),
        world(c.group ? c.group->world_size() : 1) {
    rank_seed = rank == 0 ? static_cast<uint64_t>(e.train.seed)
                          : util::mix_seed(static_cast<uint64_t>(e.train.seed), 0xD1570000ULL + static_cast<uint64_t>(rank));
  }
  bool rank0() const { return rank == 0; }
};

EngineOptions engine_options(const config::Experiment& exp) {
  EngineOptions o;
  o.backend = exp.env.backend;
  o.sampling.temperature = exp.rollout.temperature;
  o.sampling.top_p = exp.rollout.top_p;
  o.sampling.top_k = exp.rollout.top_k;
  o.sampling.max_new_tokens = exp.rollout.max_new_tokens;
  o.max_turns = static_cast<int>(exp.turns.max);
  o.refine_after_success = exp.turns.refine_after_success;
  o.dcp.enabled = exp.dcp.enabled;
  o.dcp.min_fail_ratio = exp.dcp.min_fail_ratio;
  o.dcp.max_fail_ratio = exp.dcp.max_fail_ratio;
  o.compaction = exp.compaction.enabled;
  o.max_prompt_tokens = exp.compaction.max_prompt_tokens;
  o.compaction_strategy = exp.compaction.strategy;
  o.summary_max_tokens = exp.compaction.summary_max_tokens;
  return o;
}

/// Periodic evaluation on the eval split: metrics and eval_results rows for `step`.
EvalSummary run_eval(Run& r, int64_t step) {
  EngineOptions o = engine_options(r.exp);
  o.dcp.enabled = false;  // every failed sample is debugged
  o.max_turns = static_cast<int>(r.exp.eval.turns);
  o.sampling.temperature = r.exp.eval.temperature;
  o.refine_after_success = false;
  RolloutEngine engine(*r.policy, *r.ctx.grader, o);
  std::vector<const env::RuntimeTask*> tasks;
  for (const auto* t : r.eval.tasks) tasks.push_back(t);
  const auto groups = engine.run(tasks, static_cast<int>(r.exp.eval.samples), util::mix_seed(r.exp.train.seed, 0xE7A1), nullptr);
  const auto s = summarize_eval(groups, o.max_turns, r.exp.eval.fast_p);
  if (!r.rank0()) return s;  // data parallel: every rank evaluates the same tasks, rank 0 records
  store::EvaluationInfo info;
  info.run_id = r.run_id;
  info.step = step;
  info.bench = r.set.name + "/" + r.exp.tasks.eval_split;
  info.settings_json = "{\"turns\": " + std::to_string(o.max_turns) + ", \"samples\": " +
                       std::to_string(r.exp.eval.samples) + ", \"temperature\": " +
                       std::to_string(r.exp.eval.temperature) + ", \"backend\": \"" + r.exp.env.backend + "\"}";
  const auto rows = eval_result_records(groups, tasks, r.set.name);
  std::vector<store::MetricRecord> metrics;
  for (const auto& [name, value] : eval_metrics(s)) metrics.push_back({name, value, std::nullopt});
  // One transaction: an evaluation cut short by a crash leaves nothing, so a resume redoes it.
  r.db->refresh_lease(r.run_id, r.lease);
  r.db->write_evaluation(info, rows, metrics);
  std::string accs;
  for (size_t t = 0; t < s.acc_at.size(); ++t) accs += fmt::format(" acc@{} {:.3f}", t + 1, s.acc_at[t]);
  spdlog::info("eval at step {} ({} tasks x {} samples):{} fast_1 {:.3f} compile {:.3f}", step, s.tasks, s.samples,
               accs, eval_metrics(s)["eval/fast_1"], s.compile_rate);
  return s;
}

/// train.sft.mutants: for every shipped solution in `pool` (one per train task solution, in
/// order), grades up to 8 of its one-edit mutants (rl/mutants.hpp, tried in a seeded order) with
/// the environment and appends up to `mutants` of those judged wrong (wrong_output first, then
/// compile, launch or runtime errors; never `timeout`) to `pool`. Returns "task: edit (verdict); ..."
/// for the log and the sft event.
std::string add_wrong_twins(Run& r, std::vector<TrainSample>& pool) {
  constexpr size_t kTried = 8;
  std::mt19937_64 rng(util::mix_seed(r.exp.train.seed, 0x3A7));
  struct Candidate {
    const env::RuntimeTask* task;
    std::vector<int64_t> prompt_ids;
    Mutant mutant;
  };
  std::vector<std::vector<Candidate>> per_solution;
  std::vector<GradeRequest> requests;
  for (const auto* t : r.train.tasks) {
    const auto prompt = r.policy->encode_prompt(first_turn_messages(t->spec(), r.exp.env.backend));
    for (const auto& text : shipped_solutions(t->spec(), r.exp.env.backend)) {
      auto all = solution_mutants(text);
      std::shuffle(all.begin(), all.end(), rng);
      if (all.size() > kTried) all.resize(kTried);
      per_solution.emplace_back();
      for (auto& m : all) {
        requests.push_back({t, m.text});
        per_solution.back().push_back({t, prompt, std::move(m)});
      }
    }
  }
  const auto results = r.ctx.grader->grade(requests);
  std::string summary;
  size_t k = 0, added = 0;
  for (const auto& cands : per_solution) {
    std::vector<size_t> chosen;
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < cands.size() && static_cast<int64_t>(chosen.size()) < r.exp.train.sft.mutants; ++i) {
        const auto v = results[k + i].verdict;
        const bool wrong = pass == 0 ? v == env::Verdict::wrong_output
                                     : v != env::Verdict::wrong_output && v != env::Verdict::correct &&
                                           v != env::Verdict::timeout;
        if (wrong) chosen.push_back(i);
      }
    for (size_t i : chosen) {
      TrainSample s;
      s.prompt_ids = cands[i].prompt_ids;
      s.completion_ids = r.policy->encode_completion(cands[i].mutant.text);
      pool.push_back(std::move(s));
      summary += fmt::format("{}{}: {} ({})", summary.empty() ? "" : "; ", cands[i].task->spec().name,
                             cands[i].mutant.edit, env::to_string(results[k + i].verdict));
      ++added;
    }
    k += cands.size();
  }
  spdlog::info("sft: {} wrong twins from {} solutions ({} mutants graded){}{}", added, per_solution.size(),
               requests.size(), summary.empty() ? "" : ": ", summary);
  return summary;
}

/// Supervised warm start on the train split's shipped solutions (train.sft).
void run_sft(Run& r) {
  const auto& sft = r.exp.train.sft;
  std::vector<TrainSample> pool;
  for (const auto* t : r.train.tasks) {
    const auto prompt = r.policy->encode_prompt(first_turn_messages(t->spec(), r.exp.env.backend));
    for (const auto& text : shipped_solutions(t->spec(), r.exp.env.backend)) {
      TrainSample s;
      s.prompt_ids = prompt;
      s.completion_ids = r.policy->encode_completion(text);
      pool.push_back(std::move(s));
    }
  }
  if (pool.empty()) {
    spdlog::warn("train.sft: no solutions/{}_*.md in the train split of {}; SFT skipped", r.exp.env.backend,
                 r.exp.tasks.dir);
    return;
  }
  const size_t correct_solutions = pool.size();
  const std::string twins = sft.mutants > 0 ? add_wrong_twins(r, pool) : std::string();
  torch::optim::AdamW opt(r.params, torch::optim::AdamWOptions(sft.lr)
                                        .betas({r.exp.optim.beta1, r.exp.optim.beta2})
                                        .eps(r.exp.optim.eps)
                                        .weight_decay(r.exp.optim.weight_decay));
  UpdateOptions o = r.update;
  o.temperature = 1.0;
  std::mt19937_64 rng(util::mix_seed(r.exp.train.seed, 0x5F7));
  std::vector<size_t> order(pool.size());
  std::iota(order.begin(), order.end(), 0);
  size_t pos = order.size();
  util::Progress progress("sft", sft.steps, r.ctx.progress);
  const auto t0 = Clock::now();
  double first = std::nan(""), last = std::nan("");
  int64_t steps_run = 0;
  for (int64_t step = 1; step <= sft.steps && !g_interrupted; ++step) {
    ++steps_run;
    std::vector<TrainSample> batch;
    for (int64_t b = 0; b < sft.batch_size; ++b) {
      if (pos >= order.size()) {
        std::shuffle(order.begin(), order.end(), rng);
        pos = 0;
      }
      const size_t k = order[pos++];
      if (b % r.world == r.rank) batch.push_back(pool[k]);  // data parallel: this rank's share
    }
    const double loss = sft_step(r.model, opt, r.params, batch, o);
    if (std::isnan(first)) first = loss;
    last = loss;
    // SFT metrics use steps <= 0 so that RL step numbers (and resume truncation) are unaffected.
    if (r.rank0()) r.db->add_metric(r.run_id, step - sft.steps, "sft/loss", loss);
    progress.tick();
  }
  progress.finish();
  const std::string what = fmt::format("{} solutions{}", correct_solutions,
                                       twins.empty() ? std::string() : fmt::format(" + {} wrong twins", pool.size() - correct_solutions));
  spdlog::info("sft: {} steps on {}, loss {:.3f} -> {:.3f} nats/token, {:.1f} s", steps_run, what, first, last,
               seconds_since(t0));
  if (r.rank0())
    r.db->add_event(r.run_id, 0, "sft",
                    fmt::format("{} of {} steps on {}, loss {:.4f} -> {:.4f}{}", steps_run, sft.steps, what, first, last,
                                twins.empty() ? std::string() : "; wrong twins: " + twins));
}

void save(Run& r, int64_t step) {
  r.db->refresh_lease(r.run_id, r.lease);
  const fs::path dir = r.run_dir / "checkpoints" / ("step-" + std::to_string(step));
  TrainerState st;
  st.step = step;
  st.seed = static_cast<uint64_t>(r.exp.train.seed);
  st.run_id = r.run_id;
  save_checkpoint(dir, r.exp.model.path, r.model, *r.optimizer, st);  // whole, or throws
  r.db->add_checkpoint(r.run_id, step, dir.string());                  // so a row means a whole checkpoint
  r.checkpoint = dir.string();
  r.checkpoint_step = step;
  spdlog::info("checkpoint {}", dir.string());
}

}  // namespace

TrainSummary train(const config::Experiment& exp, const TrainContext& ctx) {
  if (!ctx.grader || (!ctx.store && (!ctx.group || ctx.group->rank() == 0)))
    throw Error("train: store and grader are required");
  InterruptGuard interrupt_guard;
  const auto t_start = Clock::now();
  Run r(exp, ctx);
  TrainSummary summary;
  if (r.rank0()) r.lease = my_lease();

  // --resume: refused while another live process writes the run (nothing is changed then), a
  // no-op for a finished run; otherwise this process takes the run's lease before anything else.
  if (r.rank0() && ctx.resume_run_id) {
    auto row = r.db->get_run(*ctx.resume_run_id);
    if (!row) throw Error("--resume: no run '" + *ctx.resume_run_id + "' in " + r.db->path());
    if (row->status == store::RunStatus::finished && !r.pg) {
      summary.run_id = row->id;
      summary.already_finished = true;
      summary.steps = r.db->last_completed_step(row->id).value_or(0);
      summary.checkpoint = r.db->latest_checkpoint(row->id) ? r.db->latest_checkpoint(row->id)->path : "";
      return summary;
    }
    try {
      if (auto old = r.db->acquire_lease(row->id, r.lease, lease_stale_reason))
        spdlog::warn("run {}: took over the lease of pid {} on host {} (its process is gone)", row->id, old->pid,
                     old->host);
    } catch (const store::LeaseHeldError& e) {
      throw Error("--resume " + row->id + ": refused: the run is still being written by pid " +
                  std::to_string(e.lease().pid) + " on host " + e.lease().host + " (" + e.what() + ")");
    }
  }

  // Tasks.
  r.set = tasks::load_task_set(exp.tasks.dir);
  r.train = load_split(r.set, exp, exp.tasks.train_split);
  if (r.train.tasks.empty())
    throw ConfigError(ctx.config_path + ": key 'tasks.train_split': split '" + exp.tasks.train_split + "' of " +
                      exp.tasks.dir + " has no tasks");
  r.eval = load_split(r.set, exp, exp.tasks.eval_split);

  // Model.
  const bool cuda = exp.model.device == "cuda" || (exp.model.device == "auto" && torch::cuda::is_available());
  if (exp.model.device == "cuda" && !torch::cuda::is_available())
    throw ConfigError(ctx.config_path + ": key 'model.device': cuda requested but no CUDA device is available");
  // Data parallel: each rank trains on the GPU of its LOCAL_RANK.
  r.device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(r.pg ? r.pg->local_rank() : 0))
                  : torch::Device(torch::kCPU);
  if (!cuda && exp.model.cpu_threads > 0) at::set_num_threads(static_cast<int>(exp.model.cpu_threads));
  if (!fs::is_directory(exp.model.path))
    throw ConfigError(ctx.config_path + ": key 'model.path': no model folder '" + exp.model.path +
                      "' (create the tiny one with: leap model init --preset tiny --out " + exp.model.path + ")");
  r.tok = std::make_unique<model::Tokenizer>(model::Tokenizer::from_file(exp.model.path));
  // Master weights stay fp32; on CUDA the forward runs under bf16 autocast.
  r.model = model::load_transformer(exp.model.path, torch::kFloat32, r.device);
  if (exp.model.lora_rank > 0) {
    model::LoraOptions lo;
    lo.rank = exp.model.lora_rank;
    lo.alpha = exp.model.lora_alpha;
    r.model->add_lora(lo);
  }
  r.model->set_gradient_checkpointing(exp.model.gradient_checkpointing);
  for (auto& p : r.model->parameters())
    if (p.requires_grad()) r.params.push_back(p);
  if (exp.loss.kl_beta > 0) {
    r.reference = model::load_transformer(exp.model.path, torch::kFloat32, r.device);
    for (auto& p : r.reference->parameters()) p.requires_grad_(false);
  }
  const auto fmt = model::resolve_chat_format(model::parse_chat_format(exp.model.chat_format),
                                              r.model->config().model_type_name, *r.tok);
  r.policy = std::make_unique<LocalPolicy>(r.model, *r.tok, fmt);
  r.optimizer = std::make_unique<torch::optim::AdamW>(
      r.params, torch::optim::AdamWOptions(exp.optim.lr)
                    .betas({exp.optim.beta1, exp.optim.beta2})
                    .eps(exp.optim.eps)
                    .weight_decay(exp.optim.weight_decay));
  r.update.loss.eps_low = exp.loss.eps_low;
  r.update.loss.eps_high = exp.loss.eps_high;
  r.update.loss.kl_beta = exp.loss.kl_beta;
  r.update.aggregation = exp.compaction.enabled ? Aggregation::segment_mean : parse_aggregation(exp.loss.aggregation);
  r.update.mini_batch_size = exp.train.mini_batch_size;
  r.update.grad_accum = exp.train.grad_accum;
  r.update.ppo_epochs = exp.train.ppo_epochs;
  r.update.max_grad_norm = exp.optim.max_grad_norm;
  r.update.temperature = exp.rollout.temperature > 0 ? exp.rollout.temperature : 1.0;
  r.update.max_len = exp.rollout.max_new_tokens;
  r.update.autocast_bf16 = cuda && exp.model.dtype != "fp32";
  r.update.pad_id = r.policy->stop_ids().front();
  r.update.group = r.pg;

  // The results folder must be usable before a run row exists (else the row would stay 'running').
  if (r.rank0()) {
    std::error_code ec;
    fs::create_directories(ctx.results_dir, ec);
    if (ec || !fs::is_directory(ctx.results_dir))
      throw Error("results folder '" + ctx.results_dir + "' cannot be created" + (ec ? ": " + ec.message() : std::string()));
  }

  // Run row: new, or resumed from its last checkpoint.
  int64_t start_step = 1;
  bool redo_final_eval = false;
  if (!r.rank0()) {
    // Rank 0 owns the store; it sends the run id and the checkpoint to resume from (below).
  } else if (ctx.resume_run_id) {
    r.run_id = *ctx.resume_run_id;
    r.run_dir = fs::path(ctx.results_dir) / r.run_id;
    // (The lease was taken at the start of train(), before anything else.)
    const auto ck = r.db->latest_checkpoint(r.run_id);
    if (ck) {
      const auto st = load_checkpoint(ck->path, r.model, *r.optimizer);
      start_step = st.step + 1;
      r.checkpoint = ck->path;
    }
    // Rows after the checkpoint are dropped, so no step is written twice. Without a checkpoint
    // the run restarts from the base model, SFT included: its rows (steps <= 0) go too.
    r.db->truncate_run_after(r.run_id, ck ? start_step - 1 : std::numeric_limits<int64_t>::min());
    r.db->reopen_run(r.run_id);
    r.db->add_event(r.run_id, start_step - 1, "resume",
                   ck ? "resumed from " + ck->path : std::string("no checkpoint: restarted from the base model"));
    spdlog::info("resuming run {} at step {}", r.run_id, start_step);
    // The last checkpoint is the final one but the final evaluation never completed (a crash
    // during it): it is redone below.
    redo_final_eval = start_step > exp.train.steps && !r.db->has_evaluation(r.run_id, exp.train.steps);
  } else {
    store::RunInfo info;
    info.name = exp.name;
    info.kind = store::RunKind::train;
    info.config_yaml = config::to_yaml(exp, false);
    info.config_hash = config::config_hash(exp);
    info.seed = exp.train.seed;
    info.git_commit = git_commit();
    info.hostname = hostname();
    info.lease = r.lease;
    r.run_id = r.db->create_run(info);
    r.run_dir = fs::path(ctx.results_dir) / r.run_id;
  }
  if (r.rank0() && !ctx.device_info.empty())
    r.db->add_event(r.run_id, start_step > 1 ? std::optional<int64_t>(start_step - 1) : std::nullopt, "device",
                    ctx.device_info);
  if (r.pg) {
    // Every rank learns the run and resume point from rank 0 and reads rank 0's checkpoint
    // (the results folder must be shared, or copied, between machines), then the weights are
    // broadcast from rank 0 so every rank starts identical (LoRA init included).
    nlohmann::json hello = {{"run_id", r.run_id}, {"checkpoint", r.checkpoint}, {"start_step", start_step},
                            {"redo_final_eval", redo_final_eval}};
    hello = nlohmann::json::parse(r.pg->broadcast_bytes(hello.dump(), 0));
    r.run_id = hello.at("run_id").get<std::string>();
    start_step = hello.at("start_step").get<int64_t>();
    redo_final_eval = hello.at("redo_final_eval").get<bool>();
    if (!r.rank0()) {
      r.run_dir = fs::path(ctx.results_dir) / r.run_id;
      r.checkpoint = hello.at("checkpoint").get<std::string>();
      if (!r.checkpoint.empty()) load_checkpoint(r.checkpoint, r.model, *r.optimizer);
    }
    torch::NoGradGuard ng;
    for (auto& p : r.model->parameters()) {
      at::Tensor d = p.detach();
      r.pg->broadcast(d, 0);
    }
    const std::string me = fmt::format("rank {} (host {}, local rank {}, device {}): seed {}", r.rank, hostname(),
                                       r.pg->local_rank(), r.device.str(), r.rank_seed);
    const auto all = r.pg->all_gather_bytes(me);
    if (r.rank0()) {
      std::string msg = fmt::format("data parallel over {} ranks ({}, timeout {:g} s)", r.world, r.pg->backend(),
                                    r.pg->timeout_s());
      for (const auto& line : all) msg += "; " + line;
      r.db->add_event(r.run_id, start_step - 1, "dist", msg);
      spdlog::info("{}", msg);
    }
  }
  fs::create_directories(r.run_dir);
  r.log_path = (r.run_dir / (r.rank0() ? std::string("train.log") : fmt::format("train.rank{}.log", r.rank))).string();
  util::add_log_file(r.log_path);
  summary.run_id = r.run_id;
  summary.first_step = start_step;
  spdlog::info("run {}: {} train / {} eval tasks from {}, model {} ({} parameters, {} trained) on {}", r.run_id,
               r.train.tasks.size(), r.eval.tasks.size(), exp.tasks.dir, exp.model.path, r.model->num_parameters(),
               std::accumulate(r.params.begin(), r.params.end(), int64_t{0},
                               [](int64_t a, const at::Tensor& p) { return a + p.numel(); }),
               r.device.str());

  // A fatal signal or std::terminate from here on still marks the run failed (rl/crash_guard.hpp).
  std::optional<CrashGuard> crash_guard;
  if (r.rank0()) crash_guard.emplace(r.db->path(), r.run_id);
  try {
    if (start_step == 1 && exp.train.sft.enabled && exp.train.sft.steps > 0) run_sft(r);
    const bool do_eval = !r.eval.tasks.empty() && exp.train.eval_every > 0;
    summary.acc1_start = summary.acc1_end = summary.accT_start = summary.accT_end = std::nan("");
    if (do_eval && start_step == 1) {
      const auto s = run_eval(r, 0);
      summary.acc1_start = s.acc_at.front();
      summary.accT_start = s.acc_at.back();
    }
    RolloutEngine engine(*r.policy, *ctx.grader, engine_options(exp));
    const int64_t total = exp.train.steps;
    {
      const auto n = static_cast<int64_t>(r.train.tasks.size()), per = std::max<int64_t>(1, exp.rollout.tasks_per_step);
      summary.window = std::max<int64_t>(1, std::min<int64_t>((n + per - 1) / per, (total - start_step + 1) / 2));
    }
    std::deque<std::array<double, 3>> window_steps;  // per step: rollouts, reward sum, turn-1 correct
    auto window_mean = [](const std::deque<std::array<double, 3>>& w) {
      double n = 0, reward = 0, correct = 0;
      for (const auto& s : w) n += s[0], reward += s[1], correct += s[2];
      return std::array<double, 2>{n > 0 ? reward / n : 0.0, n > 0 ? correct / n : 0.0};
    };
    std::array<double, 2> first_window{0.0, 0.0};
    int64_t step = start_step;
    for (; step <= total; ++step) {
      // A signal may reach the ranks at different times: all stop after the same step.
      if (r.pg && r.pg->all_reduce_max({g_interrupted ? 1.0 : 0.0})[0] > 0) g_interrupted = true;
      if (g_interrupted) break;
      const double started_at = store::unix_now();
      store::StepRecord rec;
      rec.run_id = r.run_id;
      rec.step = step;
      rec.started_at = started_at;
      const auto global_batch = step_tasks(r.train.tasks, step, exp.rollout.tasks_per_step,
                                           static_cast<uint64_t>(exp.train.seed));
      // Data parallel: this rank's contiguous share of the step's groups (a group never spans ranks).
      const size_t lo = global_batch.size() * static_cast<size_t>(r.rank) / static_cast<size_t>(r.world);
      const size_t hi = global_batch.size() * static_cast<size_t>(r.rank + 1) / static_cast<size_t>(r.world);
      const std::vector<const env::RuntimeTask*> batch(global_batch.begin() + static_cast<long>(lo),
                                                       global_batch.begin() + static_cast<long>(hi));
      EngineStats es;
      const auto groups = engine.run(batch, static_cast<int>(exp.rollout.group_size),
                                     util::mix_seed(r.rank_seed, static_cast<uint64_t>(step)), &es);

      // Rewards, advantages and training samples.
      std::vector<TrainSample> samples;
      struct Where {
        size_t g, i, t;
        bool summary;
      };
      std::vector<Where> where;
      std::vector<std::vector<ScoredRollout>> scored;
      int64_t zero_adv = 0, activated = 0, recovered = 0, turn1_correct = 0, rollouts = 0;
      double reward_sum = 0, binary_sum = 0, response_tokens = 0;
      int64_t n_turns = 0;
      for (size_t g = 0; g < groups.size(); ++g) {
        scored.push_back(score_group(groups[g], exp));
        const auto& sg = scored.back();
        std::vector<double> all_adv;
        for (const auto& s : sg) all_adv.insert(all_adv.end(), s.turn_advantages.begin(), s.turn_advantages.end());
        const bool zero = all_zero(all_adv);
        zero_adv += zero ? 1 : 0;
        activated += groups[g].dcp.expand ? 1 : 0;
        recovered += groups[g].recovered;
        for (size_t i = 0; i < groups[g].rollouts.size(); ++i) {
          const auto& ro = groups[g].rollouts[i];
          reward_sum += sg[i].reward;
          binary_sum += sg[i].reward_binary;
          ++rollouts;
          if (!ro.turns.empty() && ro.turns.front().result.is_correct()) ++turn1_correct;
          if (zero && exp.loss.dynamic_sampling) continue;  // DAPO: the group teaches nothing
          const int64_t seg_base = static_cast<int64_t>((g * groups[g].rollouts.size() + i) * 4096);
          for (size_t t = 0; t < ro.turns.size(); ++t) {
            response_tokens += static_cast<double>(ro.turns[t].sample.completion_ids.size());
            ++n_turns;
            if (ro.turns[t].sample.completion_ids.empty()) continue;
            TrainSample s;
            s.prompt_ids = ro.turns[t].sample.prompt_ids;
            s.completion_ids = ro.turns[t].sample.completion_ids;
            s.advantage = sg[i].turn_advantages[t];
            s.segment_id = seg_base + ro.turns[t].segment;
            samples.push_back(std::move(s));
            where.push_back({g, i, t, false});
          }
          for (size_t k = 0; k < ro.summaries.size(); ++k) {
            const auto& sm = ro.summaries[k];
            if (sm.sample.completion_ids.empty()) continue;
            TrainSample s;
            s.prompt_ids = sm.sample.prompt_ids;
            s.completion_ids = sm.sample.completion_ids;
            // A summary shares the credit of the turn it makes room for.
            const size_t t = std::min(static_cast<size_t>(sm.turn), sg[i].turn_advantages.size());
            s.advantage = t ? sg[i].turn_advantages[t - 1] : sg[i].advantage;
            s.segment_id = seg_base + sm.segment;
            samples.push_back(std::move(s));
            where.push_back({g, i, k, true});
          }
        }
      }

      // Update.
      const auto t_update = Clock::now();
      UpdateStats us;
      if (!samples.empty() || r.pg) {  // every rank takes part in the update's collectives
        compute_old_logprobs(r.model, exp.loss.kl_beta > 0 ? &r.reference : nullptr, samples, r.update);
        set_lr(*r.optimizer, lr_at(exp.optim, exp.optim.lr, step, total));
        UpdateOptions uo = r.update;
        uo.seed = util::mix_seed(r.rank_seed, static_cast<uint64_t>(step) + 0xABCD);
        us = ppo_update(r.model, *r.optimizer, r.params, samples, uo);
        compute_new_logprob_means(r.model, samples, r.update);
      }
      const double update_s = seconds_since(t_update);

      // The step's rows.
      LogprobMeans means;
      for (size_t k = 0; k < samples.size(); ++k)
        if (!where[k].summary)
          means[{where[k].g, where[k].i, where[k].t}] = {samples[k].old_logprob_mean, samples[k].new_logprob_mean};
      rec.groups = group_records(groups, scored, batch, r.set.name, means, exp.logging.store_text);
      for (auto& gr : rec.groups) gr.group_index += static_cast<int64_t>(lo);  // position in the global batch
      for (size_t g = 0; g < groups.size(); ++g)
        for (size_t i = 0; i < groups[g].rollouts.size(); ++i)
          for (const auto& sm : groups[g].rollouts[i].summaries)
            rec.events.push_back({"compaction_summary",
                                  fmt::format("group {} rollout {} before turn {} (segment {}): {}", g + lo, i, sm.turn,
                                              sm.segment + 1, sm.sample.text),
                                  std::nullopt});
      int64_t final_correct = 0;
      for (const auto& g : groups)
        for (const auto& ro : g.rollouts) final_correct += ro.first_success() > 0 ? 1 : 0;
      double n_groups = static_cast<double>(groups.size());
      size_t n_samples = samples.size();
      if (r.pg) {
        // Step metrics over all ranks: counts and sums add up; times are the slowest rank's.
        const auto sum = r.pg->all_reduce_sum(
            {reward_sum, binary_sum, static_cast<double>(rollouts), static_cast<double>(turn1_correct),
             static_cast<double>(final_correct), static_cast<double>(zero_adv), static_cast<double>(activated),
             static_cast<double>(recovered), response_tokens, static_cast<double>(n_turns), n_groups,
             static_cast<double>(es.env_calls), static_cast<double>(es.env_calls_saved),
             static_cast<double>(es.compaction_events), static_cast<double>(es.tokens_saved),
             static_cast<double>(samples.size())});
        reward_sum = sum[0], binary_sum = sum[1], rollouts = std::llround(sum[2]), turn1_correct = std::llround(sum[3]);
        final_correct = std::llround(sum[4]), zero_adv = std::llround(sum[5]), activated = std::llround(sum[6]);
        recovered = std::llround(sum[7]), response_tokens = sum[8], n_turns = std::llround(sum[9]);
        n_groups = sum[10];
        es.env_calls = std::llround(sum[11]), es.env_calls_saved = std::llround(sum[12]);
        es.compaction_events = std::llround(sum[13]), es.tokens_saved = std::llround(sum[14]);
        n_samples = static_cast<size_t>(std::llround(sum[15]));
        const auto mx = r.pg->all_reduce_max({es.generation_seconds, es.env_seconds});
        es.generation_seconds = mx[0], es.env_seconds = mx[1];
        // Every rank's rows travel to rank 0, which writes each rollout once, in rank order.
        const auto rows = r.pg->all_gather_bytes(r.rank0() ? std::string() : store::step_rows_to_json(rec.groups, rec.events));
        if (r.rank0())
          for (size_t k = 1; k < rows.size(); ++k) store::step_rows_from_json(rows[k], rec.groups, rec.events);
      }
      const double G = n_groups;
      auto metric = [&](const std::string& name, double v) { rec.metrics.push_back({name, v, std::nullopt}); };
      const double reward_mean = rollouts ? reward_sum / static_cast<double>(rollouts) : 0.0;
      metric("reward_mean", reward_mean);
      metric("reward_binary_mean", rollouts ? binary_sum / static_cast<double>(rollouts) : 0.0);
      metric("loss", us.loss);
      metric("grad_norm", us.grad_norm);
      metric("clip_frac_low", us.clip_frac_low);
      metric("clip_frac_high", us.clip_frac_high);
      metric("entropy", us.entropy);
      metric("kl", us.kl);
      metric("response_tokens_mean", n_turns ? response_tokens / static_cast<double>(n_turns) : 0.0);
      metric("zero_adv_groups", static_cast<double>(zero_adv));
      metric("activated_groups_frac", G > 0 ? static_cast<double>(activated) / G : 0.0);
      metric("env_calls", static_cast<double>(es.env_calls));
      metric("env_calls_saved", static_cast<double>(es.env_calls_saved));
      metric("recovered", static_cast<double>(recovered));
      metric("generation_seconds", es.generation_seconds);
      metric("env_seconds", es.env_seconds);
      metric("update_seconds", update_s);
      metric("compaction_events", static_cast<double>(es.compaction_events));
      metric("compaction_tokens_saved", static_cast<double>(es.tokens_saved));
      metric("skipped_updates", static_cast<double>(us.skipped_steps));
      metric("lr", lr_at(exp.optim, exp.optim.lr, step, total));
      // Train accuracy: turn-1 and final correctness over the step's rollouts.
      const double train_acc1 = rollouts ? static_cast<double>(turn1_correct) / static_cast<double>(rollouts) : 0.0;
      metric("train_acc@1", train_acc1);
      metric("train_acc@T", rollouts ? static_cast<double>(final_correct) / static_cast<double>(rollouts) : 0.0);
      for (const auto& e : us.events) rec.events.push_back({"skipped_update", e, std::nullopt});
      rec.generation_seconds = es.generation_seconds;
      rec.env_seconds = es.env_seconds;
      rec.update_seconds = update_s;
      rec.ended_at = store::unix_now();
      if (r.rank0()) {
        r.db->refresh_lease(r.run_id, r.lease);  // throws LeaseLostError if another process took over
        r.db->write_step(rec);
        check_log_file(r.log_path);
      }

      // Summary windows: the first and the last `window` steps, rollout-weighted.
      window_steps.push_back({static_cast<double>(rollouts), reward_mean * static_cast<double>(rollouts),
                              static_cast<double>(turn1_correct)});
      if (step < start_step + summary.window) first_window = window_mean(window_steps);
      if (static_cast<int64_t>(window_steps.size()) > summary.window) window_steps.pop_front();
      const auto last_window = window_mean(window_steps);
      summary.reward_first = first_window[0];
      summary.train_acc1_first = first_window[1];
      summary.reward_last = last_window[0];
      summary.train_acc1_last = last_window[1];
      summary.steps = step;
      if (ctx.progress)
        spdlog::info("step {}/{}: reward {:.3f}, acc@1 {:.2f}, acc@T {:.2f}, activated {:.0f}%, loss {:.4f}, "
                     "{} samples; gen {:.1f} s, env {:.1f} s ({} calls, {} saved), update {:.1f} s",
                     step, total, reward_mean, train_acc1,
                     rollouts ? static_cast<double>(final_correct) / static_cast<double>(rollouts) : 0.0,
                     G > 0 ? 100.0 * static_cast<double>(activated) / G : 0.0, us.loss, n_samples,
                     es.generation_seconds, es.env_seconds, es.env_calls, es.env_calls_saved, update_s);
      if (do_eval && step % exp.train.eval_every == 0 && step != total) run_eval(r, step);
      if (exp.train.checkpoint_every > 0 && step % exp.train.checkpoint_every == 0 && step != total && r.rank0())
        save(r, step);
    }
    if (g_interrupted) {
      const int64_t last = step - 1;
      if (r.rank0()) {
        if (last >= start_step && r.checkpoint_step != last) save(r, last);  // not twice for one step
        r.db->finish_run(r.run_id, store::RunStatus::interrupted);
      }
      throw Error("interrupted after step " + std::to_string(last) + "; continue with: leap train " +
                  ctx.config_path + " --resume " + r.run_id + (r.db ? " --db " + r.db->path() : std::string()) +
                  " --results-dir " + ctx.results_dir);
    }
    if (total >= start_step) {
      if (r.rank0()) save(r, total);
      else r.checkpoint = (r.run_dir / "checkpoints" / ("step-" + std::to_string(total))).string();
      if (do_eval) {
        const auto s = run_eval(r, total);
        summary.acc1_end = s.acc_at.front();
        summary.accT_end = s.acc_at.back();
      }
    } else if (redo_final_eval && do_eval) {
      if (r.rank0())
        r.db->add_event(r.run_id, total, "resume",
                        fmt::format("the final evaluation at step {} had not completed: redone", total));
      spdlog::info("run {}: every step is done; redoing the final evaluation at step {}", r.run_id, total);
      const auto s = run_eval(r, total);
      summary.acc1_end = s.acc_at.front();
      summary.accT_end = s.acc_at.back();
    }
    summary.steps = total;
    if (r.rank0()) {
      check_log_file(r.log_path);
      // After a resume the evaluations of earlier calls are in the store, not in this process.
      const std::string accT = "eval/acc@" + std::to_string(exp.eval.turns);
      auto stored = [&](double& v, const std::string& name, int64_t at) {
        if (do_eval && std::isnan(v)) v = r.db->metric_at(r.run_id, name, at).value_or(std::nan(""));
      };
      stored(summary.acc1_start, "eval/acc@1", 0);
      stored(summary.accT_start, accT, 0);
      stored(summary.acc1_end, "eval/acc@1", total);
      stored(summary.accT_end, accT, total);
      r.db->finish_run(r.run_id, store::RunStatus::finished);
    }
  } catch (const store::LeaseLostError& e) {
    throw;  // another process writes the run now: its row is not this process's to mark
  } catch (const Error& e) {
    if (!g_interrupted && r.rank0()) {
      try {
        r.db->add_event(r.run_id, std::nullopt, "error", e.what());
        r.db->finish_run(r.run_id, store::RunStatus::failed);
      } catch (...) {
      }
    }
    throw;
  } catch (const std::exception& e) {
    // A LibTorch (c10) or standard-library error: the run is marked failed all the same, and the
    // user sees one message rather than a stack trace.
    std::string what = e.what();
    if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) what = c10e->what_without_backtrace();
    if (r.rank0()) {
      try {
        r.db->add_event(r.run_id, std::nullopt, "error", what);
        r.db->finish_run(r.run_id, store::RunStatus::failed);
      } catch (...) {
      }
    }
    throw Error("run " + r.run_id + ": " + what);
  }
  summary.checkpoint = r.checkpoint;
  summary.seconds = seconds_since(t_start);
  return summary;
}

}  // namespace leap::rl
