#include "config/schema.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace leap::config {
namespace {

template <class T>
std::function<void*(Experiment&)> member(T Experiment::*m) {
  return [m](Experiment& e) -> void* { return &(e.*m); };
}
template <class S, class T>
std::function<void*(Experiment&)> member(S Experiment::*s, T S::*m) {
  return [s, m](Experiment& e) -> void* { return &((e.*s).*m); };
}
template <class S, class U, class T>
std::function<void*(Experiment&)> member(S Experiment::*s, U S::*u, T U::*m) {
  return [s, u, m](Experiment& e) -> void* { return &(((e.*s).*u).*m); };
}

using FT = FieldType;
constexpr double kInf = 1e300;

Field F(std::string path, FT t, std::function<void*(Experiment&)> ref, std::string doc,
        std::optional<double> lo = std::nullopt, std::optional<double> hi = std::nullopt,
        bool lo_excl = false) {
  return Field{std::move(path), t, std::move(doc), {}, lo, hi, lo_excl, std::move(ref)};
}
Field E(std::string path, std::vector<std::string> choices, std::function<void*(Experiment&)> ref,
        std::string doc, FT t = FT::Enum) {
  return Field{std::move(path), t, std::move(doc), std::move(choices), {}, {}, false, std::move(ref)};
}

std::vector<Field> build() {
  using E_ = Experiment;
  std::vector<Field> s;
  s.push_back(F("name", FT::String, member(&E_::name), "run name shown by `leap report`"));
  // model
  s.push_back(F("model.path", FT::String, member(&E_::model, &ModelConfig::path),
                "Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer.json)"));
  s.push_back(E("model.dtype", {"auto", "fp32", "bf16"}, member(&E_::model, &ModelConfig::dtype),
                "weights and compute dtype; auto = bf16 on CUDA, fp32 on CPU"));
  s.push_back(E("model.device", {"auto", "cpu", "cuda"}, member(&E_::model, &ModelConfig::device),
                "where the policy runs; auto = cuda when a GPU is present"));
  s.push_back(E("model.chat_format", {"auto", "chatml", "llama3"},
                member(&E_::model, &ModelConfig::chat_format), "chat template; auto = from the checkpoint"));
  s.push_back(F("model.lora_rank", FT::Int, member(&E_::model, &ModelConfig::lora_rank),
                "LoRA rank on attention and MLP projections; 0 = full fine-tuning", 0, 4096));
  s.push_back(F("model.lora_alpha", FT::Double, member(&E_::model, &ModelConfig::lora_alpha),
                "LoRA scale numerator (scale = alpha / rank)", 0, kInf, true));
  s.push_back(F("model.gradient_checkpointing", FT::Bool,
                member(&E_::model, &ModelConfig::gradient_checkpointing),
                "recompute each decoder layer during backward to save memory"));
  s.push_back(F("model.cpu_threads", FT::Int, member(&E_::model, &ModelConfig::cpu_threads),
                "LibTorch threads for the policy on CPU; 0 = LibTorch's default (one per core)", 0, 1024));
  s.push_back(E("model.rollout_copy", {"auto", "on", "off"}, member(&E_::model, &ModelConfig::rollout_copy),
                "rollouts from a bf16 copy of the weights (LoRA merged, projections fused); auto = on CUDA over fp32 weights"));
  s.push_back(E("model.decode", {"auto", "dynamic", "static", "graph"}, member(&E_::model, &ModelConfig::decode),
                "decode steps: dynamic (finished rows dropped), static (fixed shapes), graph (static + CUDA graphs); "
                "auto = graph on CUDA without autocast, static on CUDA with it, dynamic on CPU"));
  // tasks
  s.push_back(F("tasks.dir", FT::String, member(&E_::tasks, &TasksConfig::dir),
                "task-set folder: task folders plus an optional set.yaml"));
  s.push_back(E("tasks.train_split", {"train", "eval", "all"}, member(&E_::tasks, &TasksConfig::train_split),
                "split whose tasks are rolled out for training"));
  s.push_back(E("tasks.eval_split", {"train", "eval", "all"}, member(&E_::tasks, &TasksConfig::eval_split),
                "split used by periodic evaluation"));
  s.push_back(F("tasks.levels", FT::IntList, member(&E_::tasks, &TasksConfig::levels),
                "keep only tasks of these levels; [] = all", 1, 4));
  s.push_back(F("tasks.limit", FT::Int, member(&E_::tasks, &TasksConfig::limit),
                "at most this many tasks per split; 0 = all", 0, kInf));
  // env
  s.push_back(E("env.backend", {"cpu", "cuda"}, member(&E_::env, &EnvConfig::backend),
                "kernel backend: cpu (host compiler) or cuda (NVRTC + driver API)"));
  s.push_back(F("env.workers", FT::Int, member(&E_::env, &EnvConfig::workers),
                "worker processes that run generated code", 1, 256));
  s.push_back(F("env.seeds", FT::Int, member(&E_::env, &EnvConfig::seeds),
                "correctness seeds, each with fresh random inputs", 1, 100));
  s.push_back(F("env.compile_timeout_s", FT::Double, member(&E_::env, &EnvConfig::compile_timeout_s),
                "compile time limit per candidate (s)", 0, kInf, true));
  s.push_back(F("env.run_timeout_s", FT::Double, member(&E_::env, &EnvConfig::run_timeout_s),
                "limit of one worker run of a candidate (s): CPU time on the cpu backend (wall time capped at max(3x, +30 s)), wall time on cuda", 0, kInf, true));
  s.push_back(F("env.reference_timeout_s", FT::Double, member(&E_::env, &EnvConfig::reference_timeout_s),
                "limit of one call of a task's reference (s); past it leap stops with an error naming the task (0 = none)", 0, kInf, true));
  s.push_back(F("env.compile_cache", FT::Bool, member(&E_::env, &EnvConfig::compile_cache),
                "reuse compiled artifacts keyed by a hash of source, compiler and flags"));
  s.push_back(F("env.cache_dir", FT::String, member(&E_::env, &EnvConfig::cache_dir),
                "folder of the compile cache; empty = <--results-dir>/cache"));
  s.push_back(F("env.feedback_max_chars", FT::Int, member(&E_::env, &EnvConfig::feedback_max_chars),
                "bound on the feedback text shown in the next turn (characters)", 100, 1000000));
  s.push_back(F("env.profile_feedback", FT::Bool, member(&E_::env, &EnvConfig::profile_feedback),
                "a correct answer's feedback adds its memory traffic, bandwidth and share of env.<backend>.peak_gb_s"));
  s.push_back(E("env.sandbox", {"off", "auto", "strict"}, member(&E_::env, &EnvConfig::sandbox),
                "sandbox of the processes that run or compile generated code: off, auto (what the host allows), strict (refuse without every protection)"));
  s.push_back(F("env.worker_memory_mb", FT::Int, member(&E_::env, &EnvConfig::worker_memory_mb),
                "memory of one worker process beyond its tensors (MB); 0 = auto (a quarter of the machine, 1024 to 8192); also the most scratch a cpu plan may declare (at most 1 GiB)", 0, 1 << 20));
  s.push_back(F("env.cpu.compiler", FT::String, member(&E_::env, &EnvConfig::cpu, &EnvCpuConfig::compiler),
                "host C++ compiler for cpu candidates"));
  s.push_back(F("env.cpu.flags", FT::String, member(&E_::env, &EnvConfig::cpu, &EnvCpuConfig::flags),
                "compile flags for cpu candidates"));
  s.push_back(F("env.cpu.threads", FT::Int, member(&E_::env, &EnvConfig::cpu, &EnvCpuConfig::threads),
                "threads for cpu candidate and reference timing (the same for both)", 1, 1024));
  s.push_back(F("env.cpu.peak_gb_s", FT::Double, member(&E_::env, &EnvConfig::cpu, &EnvCpuConfig::peak_gb_s),
                "stated single-core memory bandwidth the profiling feedback compares with (GB/s)", 0, kInf));
  s.push_back(F("env.cuda.arch", FT::String, member(&E_::env, &EnvConfig::cuda, &EnvCudaConfig::arch),
                "NVRTC target architecture when no GPU is present, e.g. sm_90"));
  s.push_back(F("env.cuda.peak_gb_s", FT::Double, member(&E_::env, &EnvConfig::cuda, &EnvCudaConfig::peak_gb_s),
                "the GPU's copy bandwidth for the profiling feedback (GB/s); 0 = no share shown", 0, kInf));
  s.push_back(F("env.timing.warmup", FT::Int, member(&E_::env, &EnvConfig::timing, &EnvTimingConfig::warmup),
                "untimed runs before the trials", 0, 1000));
  s.push_back(F("env.timing.trials", FT::Int, member(&E_::env, &EnvConfig::timing, &EnvTimingConfig::trials),
                "timed trials; the median is reported", 1, 100000));
  s.push_back(F("env.timing.max_seconds", FT::Double,
                member(&E_::env, &EnvConfig::timing, &EnvTimingConfig::max_seconds),
                "time box for the trials of one side (s)", 0, kInf, true));
  s.push_back(F("env.timing.suspicious_speedup", FT::Double,
                member(&E_::env, &EnvConfig::timing, &EnvTimingConfig::suspicious_speedup),
                "speedups above this are re-measured and flagged as suspicious", 1, kInf));
  s.push_back(F("env.timing.checked_runs", FT::Int,
                member(&E_::env, &EnvConfig::timing, &EnvTimingConfig::checked_runs),
                "timed runs, drawn at random, whose outputs are checked too (besides each set's last)", 0, 1000));
  s.push_back(F("env.timing.warmup_ms", FT::Double, member(&E_::env, &EnvConfig::timing, &EnvTimingConfig::warmup_ms),
                "warm-up lasts at least this long too, ms of wall time (GPU clocks ramp up)", 0, kInf));
  s.push_back(F("env.timing.min_timed_ms", FT::Double,
                member(&E_::env, &EnvConfig::timing, &EnvTimingConfig::min_timed_ms),
                "trials go on until their times sum to this, ms (at most 100 x trials)", 0, kInf));
  // rollout
  s.push_back(F("rollout.tasks_per_step", FT::Int, member(&E_::rollout, &RolloutConfig::tasks_per_step),
                "groups (one per task) per training step", 1, 100000));
  s.push_back(F("rollout.group_size", FT::Int, member(&E_::rollout, &RolloutConfig::group_size),
                "G: rollouts per task", 2, 1024));
  s.push_back(F("rollout.max_new_tokens", FT::Int, member(&E_::rollout, &RolloutConfig::max_new_tokens),
                "generated tokens per turn at most", 1, 1000000));
  s.push_back(F("rollout.temperature", FT::Double, member(&E_::rollout, &RolloutConfig::temperature),
                "sampling temperature; 0 = greedy", 0, 10));
  s.push_back(F("rollout.top_p", FT::Double, member(&E_::rollout, &RolloutConfig::top_p),
                "nucleus sampling mass", 0, 1, true));
  s.push_back(F("rollout.top_k", FT::Int, member(&E_::rollout, &RolloutConfig::top_k),
                "sample among the k most likely tokens; 0 = off", 0, kInf));
  // turns
  s.push_back(F("turns.max", FT::Int, member(&E_::turns, &TurnsConfig::max),
                "T: turns per rollout (1 = single-turn)", 1, 64));
  s.push_back(F("turns.refine_after_success", FT::Bool, member(&E_::turns, &TurnsConfig::refine_after_success),
                "keep generating turns after the first correct one"));
  s.push_back(F("turns.gamma", FT::Double, member(&E_::turns, &TurnsConfig::gamma),
                "discount of per-turn returns and of turn credit", 0, 1));
  s.push_back(F("turns.branch", FT::Int, member(&E_::turns, &TurnsConfig::branch),
                "children per expanded training attempt: 1 = a chain, > 1 = a debugging tree (Murphy)", 1, 16));
  s.push_back(F("turns.max_env_calls", FT::Int, member(&E_::turns, &TurnsConfig::max_env_calls),
                "graded turns per training group at most (turn 1 always runs); 0 = no cap", 0, kInf));
  // dcp
  s.push_back(F("dcp.enabled", FT::Bool, member(&E_::dcp, &DcpConfig::enabled),
                "Difficulty-Conditioned Pruning (LEAP); off = expand every failed rollout"));
  s.push_back(F("dcp.min_fail_ratio", FT::Double, member(&E_::dcp, &DcpConfig::min_fail_ratio),
                "expand a group only if its turn-1 fail ratio is at least this", 0, 1));
  s.push_back(F("dcp.max_fail_ratio", FT::Double, member(&E_::dcp, &DcpConfig::max_fail_ratio),
                "... and at most this", 0, 1));
  // reward
  s.push_back(E("reward.kind", {"rank", "binary", "speedup", "kernelgym"},
                member(&E_::reward, &RewardConfig::kind), "reward: rank tournament (LEAP), binary, speedup, kernelgym"));
  s.push_back(E("reward.rank_keys", {"speedup", "tokens"}, member(&E_::reward, &RewardConfig::rank_keys),
                "tie-break keys of the rank tournament after the first-success turn", FT::EnumList));
  s.push_back(F("reward.speedup_tie_margin", FT::Double, member(&E_::reward, &RewardConfig::speedup_tie_margin),
                "relative speedup difference counted as a tie", 0, kInf));
  s.push_back(F("reward.tokens_tie_margin", FT::Int, member(&E_::reward, &RewardConfig::tokens_tie_margin),
                "generated-token difference counted as a tie (tokens)", 0, kInf));
  s.push_back(F("reward.kernelgym_speedup_cap", FT::Double,
                member(&E_::reward, &RewardConfig::kernelgym_speedup_cap),
                "cap of the speedup term of the kernelgym reward", 0, kInf, true));
  s.push_back(E("reward.tree", {"none", "max", "mean"}, member(&E_::reward, &RewardConfig::tree),
                "a tree node's reward from its subtree: none, max (Murphy MaRS), mean (MeRS)"));
  // advantage
  s.push_back(E("advantage.kind", {"grpo", "dr_grpo", "rloo", "sae", "sae_projection"},
                member(&E_::advantage, &AdvantageConfig::kind),
                "advantage estimator for non-rank rewards; sae, sae_projection: Tree-OPO's staged advantages"));
  s.push_back(F("advantage.std_eps", FT::Double, member(&E_::advantage, &AdvantageConfig::std_eps),
                "added to the group std by grpo", 0, kInf));
  s.push_back(F("advantage.sae.alpha", FT::Double,
                member(&E_::advantage, &AdvantageConfig::sae, &AdvantageConfig::Sae::alpha),
                "weight of the prefix baseline V(p) in a = r - alpha V(p)", 0, 10));
  s.push_back(E("advantage.sae.value", {"expectation", "optimistic", "pessimistic"},
                member(&E_::advantage, &AdvantageConfig::sae, &AdvantageConfig::Sae::value),
                "V(p): mean, max or min of the rewards below the prefix"));
  // compaction
  s.push_back(F("compaction.enabled", FT::Bool, member(&E_::compaction, &CompactionConfig::enabled),
                "replace earlier turns by compact records when the prompt exceeds the budget"));
  s.push_back(F("compaction.max_prompt_tokens", FT::Int,
                member(&E_::compaction, &CompactionConfig::max_prompt_tokens),
                "prompt budget of a turn (tokens)", 16, 10000000));
  s.push_back(E("compaction.strategy", {"digest", "summary"}, member(&E_::compaction, &CompactionConfig::strategy),
                "digest (deterministic record) or summary (written by the policy)"));
  s.push_back(F("compaction.summary_max_tokens", FT::Int,
                member(&E_::compaction, &CompactionConfig::summary_max_tokens),
                "length limit of a generated summary (tokens)", 1, 1000000));
  // kb
  s.push_back(F("kb.dir", FT::String, member(&E_::kb, &KbConfig::dir),
                "knowledge base: a folder of markdown snippets with tags (ATRL); empty = off"));
  s.push_back(F("kb.max_tokens", FT::Int, member(&E_::kb, &KbConfig::max_tokens),
                "tokens of snippets added to one prompt or feedback message at most", 1, 1000000));
  s.push_back(E("kb.where", {"prompt", "feedback", "both"}, member(&E_::kb, &KbConfig::where),
                "snippets in turn 1's task message, in the feedback before later turns, or both"));
  // loss
  s.push_back(F("loss.eps_low", FT::Double, member(&E_::loss, &LossConfig::eps_low),
                "lower clip of the ratio: 1 - eps_low", 0, 1));
  s.push_back(F("loss.eps_high", FT::Double, member(&E_::loss, &LossConfig::eps_high),
                "upper clip of the ratio: 1 + eps_high", 0, kInf));
  s.push_back(F("loss.kl_beta", FT::Double, member(&E_::loss, &LossConfig::kl_beta),
                "weight of the k3 KL to a frozen reference; 0 = off", 0, kInf));
  s.push_back(E("loss.aggregation", {"auto", "token_mean", "seq_mean_token_mean", "constant_length", "segment_mean"},
                member(&E_::loss, &LossConfig::aggregation),
                "how token losses are averaged; auto = segment_mean with compaction, token_mean without"));
  s.push_back(F("loss.dynamic_sampling", FT::Bool, member(&E_::loss, &LossConfig::dynamic_sampling),
                "DAPO: drop groups whose advantages are all zero"));
  // optim
  s.push_back(F("optim.lr", FT::Double, member(&E_::optim, &OptimConfig::lr), "AdamW learning rate", 0, kInf, true));
  s.push_back(F("optim.weight_decay", FT::Double, member(&E_::optim, &OptimConfig::weight_decay),
                "AdamW weight decay", 0, kInf));
  s.push_back(F("optim.beta1", FT::Double, member(&E_::optim, &OptimConfig::beta1), "AdamW beta1", 0, 1));
  s.push_back(F("optim.beta2", FT::Double, member(&E_::optim, &OptimConfig::beta2), "AdamW beta2", 0, 1));
  s.push_back(F("optim.eps", FT::Double, member(&E_::optim, &OptimConfig::eps), "AdamW epsilon", 0, kInf, true));
  s.push_back(F("optim.warmup_steps", FT::Int, member(&E_::optim, &OptimConfig::warmup_steps),
                "linear learning-rate warm-up (RL steps)", 0, kInf));
  s.push_back(E("optim.schedule", {"constant", "cosine"}, member(&E_::optim, &OptimConfig::schedule),
                "learning-rate schedule after warm-up"));
  s.push_back(F("optim.max_grad_norm", FT::Double, member(&E_::optim, &OptimConfig::max_grad_norm),
                "clip the global gradient norm to this; 0 = off", 0, kInf));
  // train
  s.push_back(F("train.steps", FT::Int, member(&E_::train, &TrainConfig::steps), "RL steps", 0, kInf));
  s.push_back(F("train.seed", FT::Int, member(&E_::train, &TrainConfig::seed),
                "seed of sampling, task order and inputs", 0, kInf));
  s.push_back(F("train.mini_batch_size", FT::Int, member(&E_::train, &TrainConfig::mini_batch_size),
                "turn samples per optimizer micro-batch", 1, kInf));
  s.push_back(F("train.ppo_epochs", FT::Int, member(&E_::train, &TrainConfig::ppo_epochs),
                "passes over a step's samples", 1, 1000));
  s.push_back(F("train.grad_accum", FT::Int, member(&E_::train, &TrainConfig::grad_accum),
                "micro-batches accumulated per optimizer step", 1, 100000));
  s.push_back(F("train.share_prompts", FT::Bool, member(&E_::train, &TrainConfig::share_prompts),
                "samples of a micro-batch that share a token prefix (context, and completion tokens too) run it once "
                "(exact gradients); "
                "false = every sample runs its whole context"));
  s.push_back(E("train.old_logprobs", {"auto", "rollout", "recompute"},
                member(&E_::train, &TrainConfig::old_logprobs),
                "PPO's old log-probs: the sampler's (rollout, no extra forward), a no-grad forward before the "
                "update (recompute), or auto (rollout when generation and update compute in fp32)"));
  s.push_back(F("train.checkpoint_every", FT::Int, member(&E_::train, &TrainConfig::checkpoint_every),
                "checkpoint every N steps; 0 = only at the end", 0, kInf));
  s.push_back(F("train.eval_every", FT::Int, member(&E_::train, &TrainConfig::eval_every),
                "evaluate on the eval split every N steps; 0 = never", 0, kInf));
  s.push_back(F("train.sft.enabled", FT::Bool, member(&E_::train, &TrainConfig::sft, &SftConfig::enabled),
                "supervised warm start on the task set's shipped solutions before RL"));
  s.push_back(F("train.sft.steps", FT::Int, member(&E_::train, &TrainConfig::sft, &SftConfig::steps),
                "supervised steps", 0, kInf));
  s.push_back(F("train.sft.lr", FT::Double, member(&E_::train, &TrainConfig::sft, &SftConfig::lr),
                "supervised learning rate", 0, kInf, true));
  s.push_back(F("train.sft.batch_size", FT::Int, member(&E_::train, &TrainConfig::sft, &SftConfig::batch_size),
                "solutions per supervised step", 1, kInf));
  s.push_back(F("train.sft.mutants", FT::Int, member(&E_::train, &TrainConfig::sft, &SftConfig::mutants),
                "per shipped solution, also train on up to N one-edit copies the environment judges wrong (0 = off)",
                0, 16));
  s.push_back(F("train.sft.second_turn", FT::Int, member(&E_::train, &TrainConfig::sft, &SftConfig::second_turn),
                "per shipped solution, also train up to N second-turn examples: a wrong twin and the environment's "
                "feedback on it in the context, the solution as the target (0 = off)",
                0, 16));
  s.push_back(F("train.sft.twin_solutions", FT::Int,
                member(&E_::train, &TrainConfig::sft, &SftConfig::twin_solutions),
                "wrong twins (mutants, second_turn) for at most N shipped solutions, a seeded sample (0 = all)", 0,
                kInf));
  s.push_back(E("train.sft.mutant_kinds", {"arithmetic", "compound", "comparison", "function", "literal"},
                member(&E_::train, &TrainConfig::sft, &SftConfig::mutant_kinds),
                "only mutants of these edit kinds become wrong twins (empty = every kind)", FT::EnumList));
  s.push_back(F("train.sft.teacher_error", FT::Double,
                member(&E_::train, &TrainConfig::sft, &SftConfig::teacher_error),
                "a teacher with a systematic mistake: a solution with a site of mutant_kinds is drawn with every such "
                "edit applied with this probability (0 = off)",
                0, 1));
  s.push_back(E("train.sft.schedule", {"constant", "cosine"},
                member(&E_::train, &TrainConfig::sft, &SftConfig::schedule),
                "supervised learning rate over the steps: constant, or cosine from lr to 0 at the last step"));
  s.push_back(F("train.sft.copy_steps", FT::Int, member(&E_::train, &TrainConfig::sft, &SftConfig::copy_steps),
                "induction warm-up: before the supervised steps, N steps on copy examples (a train prompt, and a "
                "window of it as the target) at constant lr (0 = off)",
                0, kInf));
  s.push_back(F("train.sft.copy_tokens", FT::Int, member(&E_::train, &TrainConfig::sft, &SftConfig::copy_tokens),
                "tokens per copy example's window", 1, 4096));
  // eval
  s.push_back(F("eval.turns", FT::Int, member(&E_::eval, &EvalConfig::turns), "turns per evaluation rollout", 1, 64));
  s.push_back(F("eval.samples", FT::Int, member(&E_::eval, &EvalConfig::samples), "samples per task (k of pass@k)", 1, 1024));
  s.push_back(F("eval.temperature", FT::Double, member(&E_::eval, &EvalConfig::temperature),
                "evaluation sampling temperature; 0 = greedy", 0, 10));
  s.push_back(F("eval.fast_p", FT::DoubleList, member(&E_::eval, &EvalConfig::fast_p),
                "thresholds p of fast_p (correct and speedup > p)", 0, kInf));
  // logging
  s.push_back(E("logging.level", {"trace", "debug", "info", "warn", "error"},
                member(&E_::logging, &LoggingConfig::level), "log level of console and file"));
  s.push_back(F("logging.progress", FT::Bool, member(&E_::logging, &LoggingConfig::progress),
                "progress line with rate and ETA on long loops"));
  s.push_back(F("logging.store_text", FT::Bool, member(&E_::logging, &LoggingConfig::store_text),
                "keep prompt and completion text in the store"));
  s.push_back(F("logging.new_logprobs", FT::Bool, member(&E_::logging, &LoggingConfig::new_logprobs),
                "store each turn's mean log-prob after the update (one more no-grad forward per step)"));
  // dist
  s.push_back(E("dist.backend", {"auto", "nccl", "gloo"}, member(&E_::dist, &DistConfig::backend),
                "c10d backend; auto = nccl on GPUs, gloo on CPUs"));
  s.push_back(F("dist.timeout_s", FT::Double, member(&E_::dist, &DistConfig::timeout_s),
                "collective timeout (s)", 0, kInf, true));
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string fmt_num(double v) {
  if (v >= kInf) return "inf";
  return fmt::format("{}", v);
}

}  // namespace

const std::vector<Field>& schema() {
  static const std::vector<Field> s = build();
  return s;
}

const Field* find_field(const std::string& path) {
  for (const auto& f : schema())
    if (f.path == path) return &f;
  return nullptr;
}

std::string describe_type(const Field& f) {
  std::string range;
  if (f.min || f.max) {
    // An open end is ")": infinity itself is never a value (non-finite numbers are refused).
    const bool open_low = !f.min || *f.min <= -kInf, open_high = !f.max || *f.max >= kInf;
    range = fmt::format(" in {}{}, {}{}", f.min_exclusive || open_low ? "(" : "[", fmt_num(f.min.value_or(-kInf)),
                        fmt_num(f.max.value_or(kInf)), open_high ? ")" : "]");
  }
  switch (f.type) {
    case FieldType::Bool: return "true or false";
    case FieldType::Int: return "an integer" + range;
    case FieldType::Double: return "a number" + range;
    case FieldType::String: return "a string";
    case FieldType::Enum: return "one of " + fmt::format("{}", fmt::join(f.choices, ", "));
    case FieldType::IntList: return "a list of integers" + range;
    case FieldType::DoubleList: return "a list of numbers" + range;
    case FieldType::EnumList: return "a list of " + fmt::format("{}", fmt::join(f.choices, ", "));
  }
  return "?";
}

std::string suggest_key(const std::string& path) {
  std::string best;
  size_t best_d = 4;  // suggest only close keys
  for (const auto& f : schema()) {
    size_t d = edit_distance(path, f.path);
    if (d < best_d) best_d = d, best = f.path;
  }
  return best;
}

}  // namespace leap::config
