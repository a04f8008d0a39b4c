#include "rl/trainer.hpp"

#include "model/chat_template.hpp"

#include "rl/crash_guard.hpp"
#include "util/fatal.hpp"

#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <typeinfo>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <limits>
#include <array>
#include <cxxabi.h>
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
#include "rl/fused_adamw.hpp"
#include "rl/gpu_memory.hpp"
#include "rl/grader.hpp"
#include "rl/local_policy.hpp"
#include "rl/sft.hpp"
#include "rl/step_counters.hpp"
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
#include "store/lease.hpp"

namespace leap::rl {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};
std::atomic<int64_t> g_first_signal_ns{0};  ///< CLOCK_MONOTONIC of the first stop signal

int64_t monotonic_ns() {  // clock_gettime is async-signal-safe
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

/// A second SIGINT sooner than this after the first is the same interrupt: GNU `timeout -s INT`
/// signals the process and then its process group, so one timeout read as two Ctrl-Cs and
/// stopped the run mid-step (a new user, 2026-12-08).
constexpr int64_t kRepeatDebounceNs = 500'000'000;

extern "C" void on_sigint(int sig) {
  // write(2), clock_gettime and the crash guard's helper only: async-signal-safe.
  if (g_interrupted.exchange(true)) {
    if (sig != SIGINT) return;  // a repeated SIGTERM or SIGHUP changes nothing
    if (monotonic_ns() - g_first_signal_ns.load() < kRepeatDebounceNs) return;
    static const char now[] = "\nleap: interrupted again: stopping now; the run resumes from its last checkpoint\n";
    ssize_t w = write(STDERR_FILENO, now, sizeof now - 1);
    (void)w;
    interrupt_exit_now();
  }
  g_first_signal_ns = monotonic_ns();
  util::note_interrupt();  // a reference that never returns cannot block the stop (env/reference.hpp)
  static const char ack[] =
      "\nleap: stopping after the current step or evaluation (checkpointed, the run marked interrupted); "
      "Ctrl-C again stops now\n";
  ssize_t w = write(STDERR_FILENO, ack, sizeof ack - 1);
  (void)w;
}

/// For the life of a training call: SIGINT, SIGTERM and SIGHUP (the terminal closed) stop the run
/// after its current step (or evaluation), checkpointed and marked interrupted, and say so on
/// stderr at once; a second SIGINT stops the process at once (rl::interrupt_exit_now: the run
/// `interrupted`, exit 130); SIGPIPE is ignored, so a closed
/// stdout (`leap train ... | head`) fails those writes instead of killing the run mid-step (the
/// log file goes on). Both used to leave the run 'running' with a dead lease.
class InterruptGuard {
 public:
  InterruptGuard() {
    g_interrupted = false;
    prev_int_ = std::signal(SIGINT, on_sigint);
    prev_term_ = std::signal(SIGTERM, on_sigint);
    prev_hup_ = std::signal(SIGHUP, on_sigint);
    prev_pipe_ = std::signal(SIGPIPE, SIG_IGN);
  }
  ~InterruptGuard() {
    std::signal(SIGINT, prev_int_);
    std::signal(SIGTERM, prev_term_);
    std::signal(SIGHUP, prev_hup_);
    std::signal(SIGPIPE, prev_pipe_);
  }

 private:
  void (*prev_int_)(int) = nullptr;
  void (*prev_term_)(int) = nullptr;
  void (*prev_hup_)(int) = nullptr;
  void (*prev_pipe_)(int) = nullptr;
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string hostname() { return util::host_name(); }

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
  size_t not_here = 0;
  for (const tasks::TaskSpec* spec : set.split(split)) {
    if (!exp.tasks.levels.empty()) {
      if (!spec->level) continue;
      if (std::find(exp.tasks.levels.begin(), exp.tasks.levels.end(), *spec->level) == exp.tasks.levels.end()) continue;
    }
    if (!spec->runs_on(exp.env.backend)) {  // e.g. a KernelBench problem imported for the GPU only
      ++not_here;
      continue;
    }
    if (exp.tasks.limit > 0 && static_cast<int64_t>(out.owned.size()) >= exp.tasks.limit) break;
    out.owned.push_back(std::make_unique<env::RuntimeTask>(*spec, exp.env.backend));
    out.tasks.push_back(out.owned.back().get());
  }
  if (not_here)
    spdlog::warn("split '{}' of {}: {} tasks have no {} sizes (sizes_{}: none, imported for the GPU only) and are left out",
                 split, set.dir, not_here, exp.env.backend, exp.env.backend);
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

/// Learning rate of RL step `step` (1-based): linear warm-up over optim.warmup_steps RL steps
/// (the unit of train.steps and of the cosine's end, so the schedule does not depend on how many
/// optimizer steps DCP and the turns make of each RL step), then constant or cosine to 0 at `total`.
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
  std::shared_ptr<const KnowledgeBase> kb;  ///< kb.dir's snippets, or null

  Run(const config::Experiment& e, const TrainContext& c)
      : exp(e), ctx(c), db(c.store), pg(c.group), rank(c.group ? c.group->rank() : 0),
        world(c.group ? c.group->world_size() : 1) {
    rank_seed = rank == 0 ? static_cast<uint64_t>(e.train.seed)
                          : util::mix_seed(static_cast<uint64_t>(e.train.seed), 0xD1570000ULL + static_cast<uint64_t>(rank));
  }
  bool rank0() const { return rank == 0; }
  /// Test hook (TrainContext::fault_hook) at the start of a step's block.
  void fault(std::string_view block, int64_t step) const {
    if (ctx.fault_hook) ctx.fault_hook(block, step);
  }
};

EngineOptions engine_options(const config::Experiment& exp, std::shared_ptr<const KnowledgeBase> kb) {
  EngineOptions o;
  o.kb = std::move(kb);
  o.kb_options.prompt = exp.kb.where != "feedback";
  o.kb_options.feedback = exp.kb.where != "prompt";
  o.kb_options.max_tokens = exp.kb.max_tokens;
  o.backend = exp.env.backend;
  o.sampling.temperature = exp.rollout.temperature;
  o.sampling.top_p = exp.rollout.top_p;
  o.sampling.top_k = exp.rollout.top_k;
  o.sampling.max_new_tokens = exp.rollout.max_new_tokens;
  o.max_turns = static_cast<int>(exp.turns.max);
  o.refine_after_success = exp.turns.refine_after_success;
  o.branch = static_cast<int>(exp.turns.branch);
  o.max_env_calls = exp.turns.max_env_calls;
  o.dcp = exp.dcp;
  o.compaction = exp.compaction.enabled;
  o.max_prompt_tokens = exp.compaction.max_prompt_tokens;
  o.compaction_strategy = exp.compaction.strategy;
  o.summary_max_tokens = exp.compaction.summary_max_tokens;
  return o;
}

/// Periodic evaluation on the eval split: metrics and eval_results rows for `step`.
EvalSummary run_eval(Run& r, int64_t step) {
  EngineOptions o = engine_options(r.exp, r.kb);
  o.dcp.enabled = false;  // every failed sample is debugged
  o.max_turns = static_cast<int>(r.exp.eval.turns);
  o.sampling.temperature = r.exp.eval.temperature;
  o.refine_after_success = false;
  o.branch = 1;  // evaluation rollouts are chains: Acc@k is per sample and turn
  o.max_env_calls = 0;
  ReleasingGrader grading(*r.ctx.grader, r.device.is_cuda());  // cached GPU memory back before grading
  RolloutEngine engine(*r.policy, grading, o);
  std::vector<const env::RuntimeTask*> tasks;
  for (const auto* t : r.eval.tasks) tasks.push_back(t);
  const auto groups = engine.run(tasks, static_cast<int>(r.exp.eval.samples), util::mix_seed(r.exp.train.seed, 0xE7A1), nullptr);
  const auto s = summarize_eval(groups, tasks, o.max_turns, r.exp.eval.fast_p);
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


// ---- setup: before the run row exists -----------------------------------------------------

/// --resume: refused while another live process writes the run (nothing is changed then), a
/// no-op for a finished run (its summary is returned); otherwise this process takes the run's
/// lease before anything else.
std::optional<TrainSummary> take_resumed_lease(Run& r) {
  if (!r.rank0() || !r.ctx.resume_run_id) return std::nullopt;
  auto row = r.db->get_run(*r.ctx.resume_run_id);
  if (!row) throw Error("--resume: no run '" + *r.ctx.resume_run_id + "' in " + r.db->path());
  if (row->status == store::RunStatus::finished && !r.pg) {
    TrainSummary summary;
    summary.run_id = row->id;
    summary.already_finished = true;
    summary.steps = r.db->last_completed_step(row->id).value_or(0);
    const auto ck = r.db->latest_checkpoint(row->id);
    summary.checkpoint = ck ? ck->path : "";
    return summary;
  }
  try {
    if (auto old = r.db->acquire_lease(row->id, r.lease, store::lease_stale_reason))
      spdlog::warn("run {}: took over the lease of pid {} on host {} (its process is gone)", row->id, old->pid,
                   old->host);
  } catch (const store::LeaseHeldError& e) {
    throw Error("--resume " + row->id + ": refused: the run is still being written by pid " +
                std::to_string(e.lease().pid) + " on host " + e.lease().host + " (" + e.what() + ")");
  }
  return std::nullopt;
}

/// The train and eval splits.
void load_tasks(Run& r) {
  const auto& exp = r.exp;
  r.set = tasks::load_task_set(exp.tasks.dir);
  r.train = load_split(r.set, exp, exp.tasks.train_split);
  if (r.train.tasks.empty())
    throw ConfigError(r.ctx.config_path + ": key 'tasks.train_split': split '" + exp.tasks.train_split + "' of " +
                      exp.tasks.dir + " has no tasks");
  r.eval = load_split(r.set, exp, exp.tasks.eval_split);
  if (!exp.kb.dir.empty()) {
    r.kb = std::make_shared<const KnowledgeBase>(KnowledgeBase::load(exp.kb.dir));
    spdlog::info("knowledge base {}: {} snippets, {} for the {} backend ({}; sha256 {})", exp.kb.dir,
                 r.kb->snippets().size(), r.kb->count_for_backend(exp.env.backend), exp.env.backend, exp.kb.where,
                 r.kb->hash().substr(0, 16));
    if (r.kb->count_for_backend(exp.env.backend) == 0)
      spdlog::warn("knowledge base {}: no snippet is for the {} backend (or any): no note will be shown", exp.kb.dir,
                   exp.env.backend);
  }
}

/// How the policy generates (issue 48): in the update's compute dtype, bf16 over the fp32 master
/// weights on a GPU unless model.dtype is fp32; from a rollout copy (model.rollout_copy: auto =
/// when that dtype differs from the weights'); decode steps as model.decode says.
void configure_rollouts(Run& r) {
  const auto& m = r.exp.model;
  const c10::ScalarType dtype = r.device.is_cuda() && m.dtype != "fp32" ? torch::kBFloat16 : r.model->dtype();
  if (m.rollout_copy == "on" || (m.rollout_copy == "auto" && dtype != r.model->dtype()))
    r.policy->use_rollout_copy(dtype);
  else if (dtype != r.model->dtype())
    r.policy->set_compute_dtype(dtype);
  r.policy->set_decode_mode(m.decode == "dynamic" ? model::DecodeMode::Dynamic
                            : m.decode == "static" ? model::DecodeMode::Static
                            : m.decode == "graph"  ? model::DecodeMode::Graph
                                                   : model::DecodeMode::Auto);
  if (m.decode == "graph" && (!r.device.is_cuda() || (!r.policy->has_rollout_copy() && dtype != r.model->dtype())))
    throw ConfigError(r.ctx.config_path + ": key 'model.decode': graph needs model.device cuda and rollouts without "
                      "autocast (model.rollout_copy on or auto, or model.dtype fp32)");
}

/// Device, tokenizer, fp32 master weights (LoRA, gradient checkpointing), the frozen reference
/// (kl_beta > 0), the policy and the AdamW optimizer.
void load_model(Run& r) {
  const auto& exp = r.exp;
  const bool cuda = exp.model.device == "cuda" || (exp.model.device == "auto" && torch::cuda::is_available());
  if (exp.model.device == "cuda" && !torch::cuda::is_available())
    throw ConfigError(r.ctx.config_path + ": key 'model.device': cuda requested but no CUDA device is available");
  // Data parallel: each rank trains on the GPU of its LOCAL_RANK.
  r.device = cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(r.pg ? r.pg->local_rank() : 0))
                  : torch::Device(torch::kCPU);
  if (!cuda && exp.model.cpu_threads > 0) at::set_num_threads(static_cast<int>(exp.model.cpu_threads));
  config::require_input_folders(exp, r.ctx.config_path);  // callers other than the CLI (tests)
  r.tok = std::make_unique<model::Tokenizer>(model::Tokenizer::from_file(exp.model.path));
  // Master weights stay fp32; on CUDA the forward runs under bf16 autocast.
  r.model = model::load_transformer(exp.model.path, torch::kFloat32, r.device);
  model::check_tokenizer_fits(*r.tok, r.model->config().vocab_size, exp.model.path);
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
  r.policy = std::make_unique<LocalPolicy>(r.model, *r.tok, fmt, 64,
                                           model::checkpoint_chat_template(exp.model.path, fmt).default_system);
  configure_rollouts(r);
  r.optimizer = std::make_unique<FusedAdamW>(  // one fused kernel a step per device and dtype
      r.params, torch::optim::AdamWOptions(exp.optim.lr)
                    .betas({exp.optim.beta1, exp.optim.beta2})
                    .eps(exp.optim.eps)
                    .weight_decay(exp.optim.weight_decay));
}

/// The update's settings; the aggregation is the resolved `loss.aggregation` (config::resolved).
UpdateOptions update_options(const Run& r) {
  const auto& exp = r.exp;
  UpdateOptions u;
  u.loss.eps_low = exp.loss.eps_low;
  u.loss.eps_high = exp.loss.eps_high;
  u.loss.kl_beta = exp.loss.kl_beta;
  u.aggregation = parse_aggregation(exp.loss.aggregation);
  u.mini_batch_size = exp.train.mini_batch_size;
  u.grad_accum = exp.train.grad_accum;
  u.share_prompts = exp.train.share_prompts;
  u.ppo_epochs = exp.train.ppo_epochs;
  u.max_grad_norm = exp.optim.max_grad_norm;
  u.temperature = exp.rollout.temperature > 0 ? exp.rollout.temperature : 1.0;
  u.max_len = exp.rollout.max_new_tokens;
  u.autocast_bf16 = r.device.is_cuda() && exp.model.dtype != "fp32";
  // The sampler's log-probs are the old ones when it computed them as the update does (fp32).
  u.old_logprobs_from_rollout =
      exp.train.old_logprobs == "rollout" || (exp.train.old_logprobs == "auto" && !u.autocast_bf16);
  u.pad_id = r.policy->stop_ids().front();
  u.group = r.pg;
  return u;
}

// ---- the run row and resume --------------------------------------------------------------

/// Where this call starts.
struct ResumePoint {
  int64_t start_step = 1;
  bool redo_final_eval = false;  ///< the last checkpoint is the final one but its evaluation never completed
};

/// Resume: every task the run has already trained on must be the task it was (the stored
/// tasks.dir may be relative to the folder the run started in, and a task edited since would
/// mix two problems under one name). A task changed or gone is refused, naming it.
void check_resumed_tasks(Run& r) {
  std::map<std::string, std::string> now;
  for (const auto& spec : r.set.tasks) now[spec.name] = spec.hash;
  auto st = r.db->db().prepare(
      "SELECT DISTINCT t.name, t.hash FROM groups g JOIN tasks t ON t.id = g.task_id WHERE g.run_id = ?1 ORDER BY t.name");
  st.bind_text(1, r.run_id);
  while (st.step()) {
    const std::string name = st.column_text(0), hash = st.column_text(1);
    const auto it = now.find(name);
    if (it != now.end() && it->second == hash) continue;
    const std::string cwd = fs::current_path().string();
    throw ConfigError("--resume " + r.run_id + ": task '" + name + "' of tasks.dir '" + r.exp.tasks.dir + "' (from " +
                      cwd + ") " + (it == now.end() ? "is not there" : "differs from the one the run trained on") +
                      "; a relative tasks.dir is read from the folder leap runs in: resume from the folder the run "
                      "started in (or restore the task)");
  }
}

/// Rank 0: a new run row, or the resumed run reopened at its last checkpoint (weights and
/// optimizer loaded, later rows deleted so no step is written twice). Other ranks: nothing yet.
ResumePoint open_run(Run& r) {
  ResumePoint rp;
  const auto& ctx = r.ctx;
  if (!r.rank0()) return rp;  // rank 0 sends the run id and the checkpoint (join_ranks)
  // The results folder must be usable before a run row exists (else the row would stay 'running').
  std::error_code ec;
  fs::create_directories(ctx.results_dir, ec);
  if (ec || !fs::is_directory(ctx.results_dir))
    throw Error("results folder '" + ctx.results_dir + "' cannot be created" + (ec ? ": " + ec.message() : std::string()));
  if (!ctx.resume_run_id) {
    store::RunInfo info;
    info.name = r.exp.name;
    info.kind = store::RunKind::train;
    info.config_yaml = config::to_yaml(r.exp, false);  // resolved: `leap report` groups by what ran
    info.config_hash = config::config_hash(r.exp);
    info.seed = r.exp.train.seed;
    info.git_commit = git_commit();
    info.hostname = hostname();
    info.lease = r.lease;
    r.run_id = r.db->create_run(info);
    r.run_dir = fs::path(ctx.results_dir) / r.run_id;
    return rp;
  }
  r.run_id = *ctx.resume_run_id;
  r.run_dir = fs::path(ctx.results_dir) / r.run_id;
  check_resumed_tasks(r);
  const auto ck = r.db->latest_checkpoint(r.run_id);
  if (ck) {
    rp.start_step = load_checkpoint(ck->path, r.model, *r.optimizer, ck->step, r.run_id).step + 1;
    r.checkpoint = ck->path;
  }
  // Without a checkpoint the run restarts from the base model, SFT included: its rows (steps <= 0) go too.
  r.db->truncate_run_after(r.run_id, ck ? rp.start_step - 1 : std::numeric_limits<int64_t>::min());
  r.db->reopen_run(r.run_id);
  r.db->add_event(r.run_id, rp.start_step - 1, "resume",
                  ck ? "resumed from " + ck->path : std::string("no checkpoint: restarted from the base model"));
  spdlog::info("resuming run {} at step {}", r.run_id, rp.start_step);
  rp.redo_final_eval = rp.start_step > r.exp.train.steps && !r.db->has_evaluation(r.run_id, r.exp.train.steps);
  return rp;
}

/// Data parallel: every rank learns the run and resume point from rank 0 and reads rank 0's
/// checkpoint (the results folder must be shared, or copied, between machines), then the weights
/// are broadcast from rank 0 so every rank starts identical (LoRA init included).
void join_ranks(Run& r, ResumePoint& rp) {
  if (!r.pg) return;
  nlohmann::json hello = {{"run_id", r.run_id}, {"checkpoint", r.checkpoint}, {"start_step", rp.start_step},
                          {"redo_final_eval", rp.redo_final_eval}};
  hello = nlohmann::json::parse(r.pg->broadcast_bytes(hello.dump(), 0));
  r.run_id = hello.at("run_id").get<std::string>();
  rp.start_step = hello.at("start_step").get<int64_t>();
  rp.redo_final_eval = hello.at("redo_final_eval").get<bool>();
  if (!r.rank0()) {
    r.run_dir = fs::path(r.ctx.results_dir) / r.run_id;
    r.checkpoint = hello.at("checkpoint").get<std::string>();
    if (!r.checkpoint.empty()) load_checkpoint(r.checkpoint, r.model, *r.optimizer, rp.start_step - 1, r.run_id);
  }
  {
    torch::NoGradGuard ng;
    for (auto& p : r.model->parameters()) {
      at::Tensor d = p.detach();
      r.pg->broadcast(d, 0);
    }
  }
  const std::string me = fmt::format("rank {} (host {}, local rank {}, device {}): seed {}", r.rank, hostname(),
                                     r.pg->local_rank(), r.device.str(), r.rank_seed);
  const auto all = r.pg->all_gather_bytes(me);
  if (r.rank0()) {
    std::string msg = fmt::format("data parallel over {} ranks ({}, timeout {:g} s)", r.world, r.pg->backend(),
                                  r.pg->timeout_s());
    for (const auto& line : all) msg += "; " + line;
    r.db->add_event(r.run_id, rp.start_step - 1, "dist", msg);
    spdlog::info("{}", msg);
  }
}

/// The device event, the run folder and its train.log, the opening log line.
void start_log(Run& r, const ResumePoint& rp) {
  if (r.rank0() && !r.ctx.device_info.empty())
    r.db->add_event(r.run_id, rp.start_step > 1 ? std::optional<int64_t>(rp.start_step - 1) : std::nullopt, "device",
                    r.ctx.device_info);
  fs::create_directories(r.run_dir);
  r.log_path = (r.run_dir / (r.rank0() ? std::string("train.log") : fmt::format("train.rank{}.log", r.rank))).string();
  util::add_log_file(r.log_path);
  spdlog::info("run {}: {} train / {} eval tasks from {}, model {} ({} parameters, {} trained) on {}", r.run_id,
               r.train.tasks.size(), r.eval.tasks.size(), r.exp.tasks.dir, r.exp.model.path, r.model->num_parameters(),
               std::accumulate(r.params.begin(), r.params.end(), int64_t{0},
                               [](int64_t a, const at::Tensor& p) { return a + p.numel(); }),
               r.device.str());
}

// ---- the blocks of one RL step --------------------------------------------------------------

/// This rank's contiguous share [lo, hi) of the step's groups (a group never spans ranks).
struct RankBatch {
  std::vector<const env::RuntimeTask*> tasks;
  size_t lo = 0;  ///< index of this rank's first group in the step's global batch
};

RankBatch rank_batch(const Run& r, int64_t step) {
  const auto global = step_tasks(r.train.tasks, step, r.exp.rollout.tasks_per_step,
                                 static_cast<uint64_t>(r.exp.train.seed));
  const size_t lo = global.size() * static_cast<size_t>(r.rank) / static_cast<size_t>(r.world);
  const size_t hi = global.size() * static_cast<size_t>(r.rank + 1) / static_cast<size_t>(r.world);
  return {std::vector<const env::RuntimeTask*>(global.begin() + static_cast<long>(lo), global.begin() + static_cast<long>(hi)),
          lo};
}

/// Every group scored with the configured reward and advantage (rl/scoring.hpp).
std::vector<std::vector<ScoredRollout>> score_groups(const std::vector<GroupResult>& groups,
                                                     const config::Experiment& exp) {
  std::vector<std::vector<ScoredRollout>> out;
  for (const auto& g : groups) out.push_back(score_group(g, exp));
  return out;
}

/// The step's training samples and where each came from.
struct StepSamples {
  struct Where {
    size_t g, i, t;  ///< group, rollout, turn (or summary) index
    bool summary;
  };
  std::vector<TrainSample> samples;
  std::vector<Where> where;
  std::vector<bool> trained;  ///< per group: its turns are samples (not dropped by DAPO dynamic sampling)
};

/// One sample per graded turn and per summary with tokens (void rollouts, RolloutResult::
/// infra_error, have none), each with its turn-credited advantage
/// (a summary shares the credit of the turn it makes room for) and a segment id unique over the
/// step's global batch (`lo`: this rank's first group).
StepSamples build_samples(const std::vector<GroupResult>& groups, const std::vector<std::vector<ScoredRollout>>& scored,
                          size_t lo, bool dynamic_sampling, bool tree) {
  StepSamples out;
  auto add = [&](const TurnResult& tr, double advantage, int64_t segment, StepSamples::Where w) {
    if (tr.sample.completion_ids.empty()) return;
    TrainSample s;
    s.prompt_ids = tr.sample.prompt_ids;
    s.completion_ids = tr.sample.completion_ids;
    s.rollout_logp = tr.sample.logprobs;
    s.advantage = advantage;
    s.segment_id = segment;
    out.samples.push_back(std::move(s));
    out.where.push_back(w);
  };
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<double> adv;
    for (const auto& s : scored[g]) adv.insert(adv.end(), s.turn_advantages.begin(), s.turn_advantages.end());
    out.trained.push_back(!(dynamic_sampling && all_zero(adv)));  // DAPO: an all-zero group teaches nothing
    if (!out.trained.back()) continue;
    const size_t G = groups[g].rollouts.size();
    for (size_t i = 0; i < G; ++i) {
      const auto& ro = groups[g].rollouts[i];
      // Void (the environment failed): no sample, no weight in the loss. A chain's void rollout is
      // void as a whole; in a tree only the void node is (its siblings and ancestors are scored).
      if (!tree && ro.infra_error()) continue;
      const auto& ta = scored[g][i].turn_advantages;
      const int64_t seg_base = static_cast<int64_t>(((lo + g) * G + i) * 4096);
      for (size_t t = 0; t < ro.turns.size(); ++t)
        if (!ro.turns[t].result.is_infra_error())
          add(ro.turns[t], ta[t], seg_base + ro.turns[t].segment, {g, i, t, false});
      for (size_t k = 0; k < ro.summaries.size(); ++k) {
        // A summary shares the advantage of the turn generated from its compact record.
        const int next = ro.summaries[k].next_turn;
        const double adv = next >= 0 && static_cast<size_t>(next) < ta.size() ? ta[static_cast<size_t>(next)]
                                                                               : scored[g][i].advantage;
        add(ro.summaries[k], adv, seg_base + ro.summaries[k].segment, {g, i, k, true});
      }
    }
  }
  return out;
}

/// Old (and reference) log-probs, segment_mean's fixed weights over the step and all ranks, the
/// PPO epochs at the step's learning rate, then (logging.new_logprobs) the new log-prob means.
/// Every rank takes part (collectives), with or without samples.
UpdateStats update_policy(Run& r, std::vector<TrainSample>& samples, int64_t step) {
  if (samples.empty() && !r.pg) return {};
  compute_old_logprobs(r.model, r.exp.loss.kl_beta > 0 ? &r.reference : nullptr, samples, r.update);
  if (r.update.aggregation == Aggregation::segment_mean) set_step_segment_weights(samples, r.pg);
  set_lr(*r.optimizer, lr_at(r.exp.optim, r.exp.optim.lr, step, r.exp.train.steps));
  UpdateOptions uo = r.update;
  uo.seed = util::mix_seed(r.rank_seed, static_cast<uint64_t>(step) + 0xABCD);
  const UpdateStats us = ppo_update(r.model, *r.optimizer, r.params, samples, uo);
  if (r.exp.logging.new_logprobs) compute_new_logprob_means(r.model, samples, r.update);
  return us;
}

/// The step's metrics (docs/training.md "Metrics") from the all-reduced counters.
void add_metrics(store::StepRecord& rec, const StepCounters& c, const UpdateStats& us, double update_s, double lr) {
  auto metric = [&](const std::string& name, double v) { rec.metrics.push_back({name, v, std::nullopt}); };
  metric("reward_mean", c.reward_mean());
  metric("reward_binary_mean", c.rollouts ? c.binary_sum / static_cast<double>(c.rollouts) : 0.0);
  metric("loss", us.loss);
  metric("grad_norm", us.grad_norm);
  metric("clip_frac_low", us.clip_frac_low);
  metric("clip_frac_high", us.clip_frac_high);
  metric("entropy", us.entropy);
  metric("kl", us.kl);
  metric("response_tokens_mean", c.turns ? c.response_tokens / static_cast<double>(c.turns) : 0.0);
  metric("zero_adv_groups", static_cast<double>(c.zero_adv_groups));
  metric("activated_groups_frac", c.activated_frac());
  metric("env_calls", static_cast<double>(c.env_calls));
  metric("env_calls_saved", static_cast<double>(c.env_calls_saved));
  metric("recovered", static_cast<double>(c.recovered));
  metric("infra_errors", static_cast<double>(c.infra_errors));
  metric("generation_seconds", c.generation_seconds);
  metric("env_seconds", c.env_seconds);
  metric("update_seconds", update_s);
  metric("compaction_events", static_cast<double>(c.compaction_events));
  metric("compaction_tokens_saved", static_cast<double>(c.compaction_tokens_saved));
  metric("skipped_updates", static_cast<double>(us.skipped_steps));
  metric("lr", lr);
  metric("train_acc@1", c.train_acc1());
  metric("train_acc@T", c.train_accT());
  for (const auto& e : us.events) rec.events.push_back({"skipped_update", e, std::nullopt});
  rec.generation_seconds = c.generation_seconds;
  rec.env_seconds = c.env_seconds;
  rec.update_seconds = update_s;
}

/// This rank's groups, rollouts and turns (with their log-prob means) and summary events into
/// `rec`; with a group every rank's rows travel to rank 0, which keeps them in rank order.
void add_rows(Run& r, store::StepRecord& rec, const std::vector<GroupResult>& groups,
              const std::vector<std::vector<ScoredRollout>>& scored, const StepSamples& ss, const RankBatch& batch) {
  LogprobMeans means;
  for (size_t k = 0; k < ss.samples.size(); ++k)
    if (!ss.where[k].summary)
      means[{ss.where[k].g, ss.where[k].i, ss.where[k].t}] = {
          ss.samples[k].old_logprob_mean,
          r.exp.logging.new_logprobs ? std::optional<double>(ss.samples[k].new_logprob_mean) : std::nullopt};
  rec.groups = group_records(groups, scored, batch.tasks, r.set.name, means, r.exp.logging.store_text);
  for (auto& gr : rec.groups) gr.group_index += static_cast<int64_t>(batch.lo);  // position in the global batch
  for (size_t g = 0; g < groups.size(); ++g)
    for (size_t i = 0; i < groups[g].rollouts.size(); ++i)
      for (const auto& sm : groups[g].rollouts[i].summaries)
        rec.events.push_back({"compaction_summary",
                              fmt::format("group {} rollout {} before turn {} (segment {}): {}", g + batch.lo, i,
                                          sm.turn, sm.segment + 1, sm.sample.text),
                              std::nullopt});
  if (!r.pg) return;
  const auto rows = r.pg->all_gather_bytes(r.rank0() ? std::string() : store::step_rows_to_json(rec.groups, rec.events));
  if (r.rank0())
    for (size_t k = 1; k < rows.size(); ++k) store::step_rows_from_json(rows[k], rec.groups, rec.events);
}

/// Rank 0 writes the step in one transaction (after checking that it still holds the lease).
void store_step(Run& r, store::StepRecord& rec) {
  rec.ended_at = store::unix_now();
  if (!r.rank0()) return;
  r.db->refresh_lease(r.run_id, r.lease);  // throws LeaseLostError if another process took over
  r.db->write_step(rec);
  check_log_file(r.log_path);
}

void log_step(const Run& r, int64_t step, const StepCounters& c, const UpdateStats& us, double update_s) {
  if (!r.ctx.progress) return;
  spdlog::info("step {}/{}: reward {:.3f}, acc@1 {:.2f}, acc@T {:.2f}, activated {:.0f}%, loss {:.4f}, "
               "{} samples; gen {:.1f} s, env {:.1f} s ({} calls, {} saved), update {:.1f} s",
               step, r.exp.train.steps, c.reward_mean(), c.train_acc1(), c.train_accT(), 100.0 * c.activated_frac(),
               us.loss, c.samples, c.generation_seconds, c.env_seconds, c.env_calls, c.env_calls_saved, update_s);
}

/// One RL step, top to bottom; each block is one call. Returns the step's counters (all ranks).
StepCounters train_step(Run& r, RolloutEngine& engine, int64_t step) {
  store::StepRecord rec;
  rec.run_id = r.run_id;
  rec.step = step;
  rec.started_at = store::unix_now();

  // 1. Rollouts: this rank's groups, up to turns.max turns each (DCP after turn 1, compaction).
  r.fault("rollouts", step);
  const RankBatch batch = rank_batch(r, step);
  EngineStats es;
  const auto groups = engine.run(batch.tasks, static_cast<int>(r.exp.rollout.group_size),
                                 util::mix_seed(r.rank_seed, static_cast<uint64_t>(step)), &es);

  // 2. Rewards and advantages: the configured reward, its estimator and turn credit, per group.
  r.fault("rewards", step);
  const auto scored = score_groups(groups, r.exp);

  // 3. Samples: every turn and summary with its credited advantage and global segment id.
  r.fault("samples", step);
  StepSamples ss = build_samples(groups, scored, batch.lo, r.exp.loss.dynamic_sampling, config::tree_scoring(r.exp));

  // 4. Update: old log-probs, segment weights over the step, PPO epochs, new log-prob means.
  r.fault("update", step);
  const auto t_update = Clock::now();
  const UpdateStats us = update_policy(r, ss.samples, step);
  const double update_s = seconds_since(t_update);

  // 5. Metrics: this rank's counters, summed over the ranks.
  r.fault("metrics", step);
  StepCounters c = count_step(groups, scored, ss.trained, static_cast<int64_t>(ss.samples.size()), es);
  if (r.pg) c.all_reduce(*r.pg);
  add_metrics(rec, c, us, update_s, lr_at(r.exp.optim, r.exp.optim.lr, step, r.exp.train.steps));

  // 6. Store: every rank's rows, one transaction on rank 0.
  r.fault("store", step);
  add_rows(r, rec, groups, scored, ss, batch);
  store_step(r, rec);
  log_step(r, step, c, us, update_s);

  // 7. Eval, periodic (the final one runs after the last step).
  r.fault("eval", step);
  const auto& t = r.exp.train;
  if (!r.eval.tasks.empty() && t.eval_every > 0 && step % t.eval_every == 0 && step != t.steps) run_eval(r, step);

  // 8. Checkpoint, periodic (the final one runs after the last step).
  r.fault("checkpoint", step);
  if (t.checkpoint_every > 0 && step % t.checkpoint_every == 0 && step != t.steps && r.rank0()) save(r, step);
  return c;
}

// ---- the loop and the end of a run -----------------------------------------------------------

/// The summary's first and last windows of `window` steps, rollout-weighted.
class SummaryWindows {
 public:
  SummaryWindows(TrainSummary& s, int64_t start_step) : s_(s), start_(start_step) {}
  void add(int64_t step, const StepCounters& c) {
    last_.push_back({static_cast<double>(c.rollouts), c.reward_sum, static_cast<double>(c.turn1_correct)});
    if (static_cast<int64_t>(last_.size()) > s_.window) last_.pop_front();
    if (step < start_ + s_.window) first_ = last_;
    mean(first_, s_.reward_first, s_.train_acc1_first);
    mean(last_, s_.reward_last, s_.train_acc1_last);
    s_.steps = step;
  }

 private:
  static void mean(const std::deque<std::array<double, 3>>& w, double& reward, double& acc1) {
    double n = 0, rw = 0, ok = 0;
    for (const auto& x : w) n += x[0], rw += x[1], ok += x[2];
    reward = n > 0 ? rw / n : 0.0;
    acc1 = n > 0 ? ok / n : 0.0;
  }
  TrainSummary& s_;
  int64_t start_;
  std::deque<std::array<double, 3>> first_, last_;  // per step: rollouts, reward sum, turn-1 correct
};

/// Steps start_step..train.steps (until an interrupt); returns the first step not run.
int64_t run_steps(Run& r, int64_t start_step, TrainSummary& summary) {
  ReleasingGrader grading(*r.ctx.grader, r.device.is_cuda());  // cached GPU memory back before grading
  RolloutEngine engine(*r.policy, grading, engine_options(r.exp, r.kb));
  const int64_t total = r.exp.train.steps;
  const auto n = static_cast<int64_t>(r.train.tasks.size()), per = std::max<int64_t>(1, r.exp.rollout.tasks_per_step);
  summary.window = std::max<int64_t>(1, std::min<int64_t>((n + per - 1) / per, (total - start_step + 1) / 2));
  SummaryWindows windows(summary, start_step);
  int64_t step = start_step;
  for (; step <= total; ++step) {
    // A signal may reach the ranks at different times: all stop after the same step.
    if (r.pg && r.pg->all_reduce_max({g_interrupted ? 1.0 : 0.0})[0] > 0) g_interrupted = true;
    if (g_interrupted) break;
    windows.add(step, train_step(r, engine, step));
  }
  return step;
}

/// After an interrupt: a checkpoint of the last whole step (not twice), the run `interrupted`,
/// and the error that tells how to continue.
[[noreturn]] void stop_interrupted(Run& r, int64_t last, int64_t start_step) {
  if (r.rank0()) {
    if (last >= start_step && r.checkpoint_step != last) save(r, last);
    r.db->finish_run(r.run_id, store::RunStatus::interrupted);
  }
  throw Error("interrupted after step " + std::to_string(last) + "; continue with: leap train " + r.ctx.config_path +
              " --resume " + r.run_id + (r.db ? " --db " + r.db->path() : std::string()) + " --results-dir " +
              r.ctx.results_dir);
}

/// The final checkpoint and evaluation (or the redone evaluation of a resume), the start and end
/// accuracies (from the store after a resume), and the run `finished`.
void finish(Run& r, const ResumePoint& rp, TrainSummary& summary) {
  const int64_t total = r.exp.train.steps;
  const bool do_eval = !r.eval.tasks.empty() && r.exp.train.eval_every > 0;
  if (total >= rp.start_step) {
    if (r.rank0()) save(r, total);
    else r.checkpoint = (r.run_dir / "checkpoints" / ("step-" + std::to_string(total))).string();
  } else if (rp.redo_final_eval && do_eval && r.rank0()) {
    r.db->add_event(r.run_id, total, "resume", fmt::format("the final evaluation at step {} had not completed: redone", total));
    spdlog::info("run {}: every step is done; redoing the final evaluation at step {}", r.run_id, total);
  }
  if (do_eval && (total >= rp.start_step || rp.redo_final_eval)) {
    const auto s = run_eval(r, total);
    summary.acc1_end = s.acc_at.front();
    summary.accT_end = s.acc_at.back();
  }
  summary.steps = total;
  if (!r.rank0()) return;
  check_log_file(r.log_path);
  // After a resume the evaluations of earlier calls are in the store, not in this process.
  const std::string accT = "eval/acc@" + std::to_string(r.exp.eval.turns);
  auto stored = [&](double& v, const std::string& name, int64_t at) {
    if (do_eval && std::isnan(v)) v = r.db->metric_at(r.run_id, name, at).value_or(std::nan(""));
  };
  stored(summary.acc1_start, "eval/acc@1", 0);
  stored(summary.accT_start, accT, 0);
  stored(summary.acc1_end, "eval/acc@1", total);
  stored(summary.accT_end, accT, total);
  r.db->finish_run(r.run_id, store::RunStatus::finished);
}

/// SFT (a fresh run only), the step-0 evaluation, the steps, then the interrupt or the end.
void train_run(Run& r, const ResumePoint& rp, TrainSummary& summary) {
  const auto& exp = r.exp;
  if (rp.start_step == 1 && exp.train.sft.enabled && exp.train.sft.steps > 0) {
    ReleasingGrader grading(*r.ctx.grader, r.device.is_cuda());  // cached GPU memory back before grading
    SftContext sc{exp, r.model, r.params, *r.policy, grading, r.train.tasks, r.update, r.rank, r.world,
                  r.rank0() ? r.db : nullptr, r.run_id, r.ctx.progress, &g_interrupted};
    run_sft(sc);
  }
  summary.acc1_start = summary.acc1_end = summary.accT_start = summary.accT_end = std::nan("");
  if (!r.eval.tasks.empty() && exp.train.eval_every > 0 && rp.start_step == 1) {
    const auto s = run_eval(r, 0);
    summary.acc1_start = s.acc_at.front();
    summary.accT_start = s.acc_at.back();
  }
  const int64_t next = run_steps(r, rp.start_step, summary);
  if (g_interrupted) stop_interrupted(r, next - 1, rp.start_step);
  finish(r, rp, summary);
}

/// "TYPE: message" of an exception (the type demangled; a LibTorch error without its backtrace).
std::string describe(const std::exception& e) {
  int status = 0;
  const char* mangled = typeid(e).name();
  std::unique_ptr<char, void (*)(void*)> name(abi::__cxa_demangle(mangled, nullptr, nullptr, &status), std::free);
  std::string what = e.what();
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) what = c10e->what_without_backtrace();
  return std::string(status == 0 && name ? name.get() : mangled) + ": " + what;
}

/// Marks the run `failed` with an `error` event (rank 0; a failure to record is swallowed so the
/// original error propagates).
void mark_failed(Run& r, const std::string& message) noexcept {
  if (!r.rank0() || !r.db) return;
  try {
    r.db->add_event(r.run_id, std::nullopt, "error", message);
    r.db->finish_run(r.run_id, store::RunStatus::failed);
  } catch (...) {
  }
}

}  // namespace

TrainSummary train(const config::Experiment& experiment, const TrainContext& ctx) {
  if (!ctx.grader || (!ctx.store && (!ctx.group || ctx.group->rank() == 0)))
    throw Error("train: store and grader are required");
  InterruptGuard interrupt_guard;
  const auto t_start = Clock::now();
  const config::Experiment exp = config::resolved(experiment);  // what runs is what the run row stores
  Run r(exp, ctx);
  if (r.rank0()) r.lease = store::my_lease();
  if (auto done = take_resumed_lease(r)) return *done;
  ResumePoint rp;
  try {
    load_tasks(r);
    load_model(r);
    r.update = update_options(r);
    rp = open_run(r);
  } catch (...) {
    // A resume whose set-up failed (a task changed, a corrupt checkpoint) leaves the run as it
    // found it: its status, and no lease of a process that is about to exit.
    if (r.rank0() && r.ctx.resume_run_id && r.db) try {
        r.db->release_lease(*r.ctx.resume_run_id, r.lease);
      } catch (...) {
      }
    throw;
  }

  // From here the run row exists: whatever leaves train() marks it failed (an interrupt marks it
  // `interrupted`; a lost lease leaves it to its new writer), and a fatal signal or
  // std::terminate does too (rl/crash_guard.hpp).
  TrainSummary summary;
  try {
    join_ranks(r, rp);
    start_log(r, rp);
    summary.run_id = r.run_id;
    summary.first_step = rp.start_step;
    std::optional<CrashGuard> crash_guard;
    if (r.rank0()) crash_guard.emplace(r.db->path(), r.run_id);
    train_run(r, rp, summary);
  } catch (const store::LeaseLostError&) {
    throw;  // another process writes the run now: its row is not this process's to mark
  } catch (const Error& e) {
    if (!g_interrupted) mark_failed(r, describe(e));
    throw;
  } catch (const std::exception& e) {
    // A LibTorch (c10), filesystem or allocation error: marked the same way, and the user sees
    // one line (type and message) rather than a stack trace.
    const std::string what = describe(e);
    mark_failed(r, what);
    throw Error("run " + r.run_id + ": " + what);
  } catch (...) {
    mark_failed(r, "an exception of unknown type");
    throw;
  }
  summary.checkpoint = r.checkpoint;
  summary.seconds = seconds_since(t_start);
  return summary;
}

}  // namespace leap::rl
