#pragma once
// The typed experiment schema: one struct per YAML section of DESIGN.md. Plain data, no YAML or
// torch types; loading, validation and serialisation live in config/load.hpp and config/schema.hpp.
// Every default here is mirrored, key for key, by configs/reference.yaml (a test keeps them equal).
#include <cstdint>
#include <string>
#include <vector>

namespace leap::config {

/// `model:` the policy checkpoint (a Hugging Face folder) and how to hold it.
struct ModelConfig {
  std::string path = "models/tiny";      ///< HF checkpoint folder: config.json, *.safetensors, tokenizer.json
  std::string dtype = "auto";            ///< auto | fp32 | bf16 (auto: bf16 on CUDA, fp32 on CPU)
  std::string device = "auto";           ///< auto | cpu | cuda
  std::string chat_format = "auto";      ///< auto | chatml | llama3 (auto: from the checkpoint)
  int64_t lora_rank = 0;                 ///< 0 = full fine-tuning; > 0 = LoRA adapters of this rank
  double lora_alpha = 16.0;              ///< LoRA scaling numerator (scale = alpha / rank)
  bool gradient_checkpointing = false;   ///< recompute each decoder layer in backward
  /// LibTorch intra-op threads when the policy runs on CPU (0: LibTorch's default). One suits
  /// small models best: OpenMP threads spin-wait and collapse when the environment's compiler and
  /// workers share the cores.
  int64_t cpu_threads = 1;
  /// Rollouts from a copy of the weights in the rollout dtype with LoRA merged and q/k/v, gate/up
  /// fused (model/rollout_weights.hpp): auto = when rollouts run in another dtype than the
  /// weights (bf16 over fp32 on CUDA) | on | off (the policy itself, under autocast).
  std::string rollout_copy = "auto";
  /// How generation runs its decode steps (model::DecodeMode): auto | dynamic | static | graph.
  std::string decode = "auto";
};

/// `tasks:` the task set and its split.
struct TasksConfig {
  std::string dir = "tasks/starter";     ///< task-set folder (task folders + optional set.yaml)
  std::string train_split = "train";     ///< split name used for rollouts
  std::string eval_split = "eval";       ///< split name used for periodic evaluation
  std::vector<int64_t> levels = {};      ///< keep only these levels (empty: all)
  int64_t limit = 0;                     ///< keep at most this many tasks per split (0: all)
};

/// `env.cpu:` host-compiler backend.
struct EnvCpuConfig {
  std::string compiler = "g++";                          ///< host C++ compiler
  std::string flags = "-std=gnu++20 -O3 -march=native -fPIC -shared";  ///< compile flags for candidates
  int64_t threads = 1;                                   ///< threads for candidate and reference timing
  double peak_gb_s = 10.0;  ///< stated single-core memory bandwidth the profiling feedback compares with (GB/s)
};

/// `env.cuda:` NVRTC + driver API backend.
struct EnvCudaConfig {
  std::string arch = "sm_90";  ///< NVRTC target when no GPU is present (the GPU's own arch otherwise)
  double peak_gb_s = 0;        ///< the GPU's copy bandwidth for the profiling feedback (GB/s); 0 = no share shown
};

/// `env.timing:` how candidate and reference are timed.
struct EnvTimingConfig {
  int64_t warmup = 3;                 ///< untimed runs before the trials
  int64_t trials = 20;                ///< timed trials; the median is reported
  double max_seconds = 2.0;           ///< time box for the trials of one side (s)
  double suspicious_speedup = 10.0;   ///< speedups above this are re-measured and flagged
  int64_t checked_runs = 6;           ///< timed runs drawn at random whose outputs are checked too
  double warmup_ms = 0;               ///< warm-up lasts at least this long too (ms, each side)
  double min_timed_ms = 0;            ///< trials go on until they sum to this (ms, each side)
};

/// `env:` the kernel environment.
struct EnvConfig {
  std::string backend = "cpu";         ///< cpu | cuda
  int64_t workers = 2;                 ///< worker processes that run generated code
  int64_t seeds = 5;                   ///< correctness seeds (fresh random inputs each)
  double compile_timeout_s = 60.0;     ///< per-candidate compile limit (s)
  double run_timeout_s = 10.0;         ///< limit of one worker job (s): CPU time on cpu, wall time on cuda
  double reference_timeout_s = 300.0;  ///< limit of one call of a task's reference (s); past it leap stops with an error
  bool compile_cache = true;           ///< reuse compiled artifacts keyed by source + flags hash
  std::string cache_dir;  ///< where compiled artifacts are kept; empty = <--results-dir>/cache
  int64_t feedback_max_chars = 2000;   ///< bound on the feedback text shown to the model
  bool profile_feedback = false;       ///< a correct answer's feedback adds traffic and bandwidth (env/profile.hpp)
  /// off | auto | strict: the sandbox around processes that run or compile generated code
  /// (docs/env.md "Sandbox"); auto applies what the host allows, strict refuses to run without all.
  std::string sandbox = "auto";
  /// Memory of one worker process beyond its tensors (MB); 0 = auto (a quarter of the machine's
  /// memory, between 1024 and 8192). Past it an allocation fails: runtime_error naming the limit.
  int64_t worker_memory_mb = 0;
  EnvCpuConfig cpu;
  EnvCudaConfig cuda;
  EnvTimingConfig timing;
};

/// `rollout:` sampling of the G rollouts of a group.
struct RolloutConfig {
  int64_t tasks_per_step = 4;     ///< groups (tasks) per training step
  int64_t group_size = 8;         ///< G: rollouts per task
  int64_t max_new_tokens = 512;   ///< per turn (tokens)
  double temperature = 1.0;       ///< 0 = greedy
  double top_p = 1.0;             ///< nucleus mass, (0, 1]
  int64_t top_k = 0;              ///< 0 = off
};

/// `turns:` multi-turn debugging.
struct TurnsConfig {
  int64_t max = 3;                    ///< T: turns per rollout
  bool refine_after_success = false;  ///< keep going after the first correct turn
  double gamma = 0.4;                 ///< discount of per-turn returns and turn credit
  int64_t branch = 1;                 ///< children per expanded attempt (1 = a chain; > 1 = a debugging tree, Murphy)
  int64_t max_env_calls = 0;          ///< graded turns per training group at most; 0 = no cap
};

/// `dcp:` Difficulty-Conditioned Pruning (LEAP): expand a group to turns 2..T only if
/// min_fail_ratio <= f <= max_fail_ratio, f = failed turn-1 rollouts / G.
struct DcpConfig {
  bool enabled = true;
  double min_fail_ratio = 0.5;
  double max_fail_ratio = 0.875;
};

/// `reward:` reward kind and the rank tournament's later keys (DESIGN.md section 4).
struct RewardConfig {
  std::string kind = "rank";                 ///< rank | binary | speedup | kernelgym
  std::vector<std::string> rank_keys = {"speedup", "tokens"};  ///< later tournament keys (DESIGN.md 4: speedup, then tokens)
  double speedup_tie_margin = 0.05;          ///< relative speedup difference counted as a tie
  int64_t tokens_tie_margin = 16;            ///< token-count difference counted as a tie (tokens)
  double kernelgym_speedup_cap = 3.0;        ///< cap of the speedup term of `kernelgym`
  std::string tree = "none";                 ///< none | max (Murphy MaRS) | mean (MeRS): a node's reward from its subtree
};

/// `advantage:` estimator for non-rank rewards (the rank reward is its own advantage).
struct AdvantageConfig {
  std::string kind = "grpo";  ///< grpo | dr_grpo | rloo | sae | sae_projection (Tree-OPO)
  double std_eps = 1.0e-6;    ///< added to the group std for grpo
  /// `advantage.sae:` staged advantage estimation (Tree-OPO, arXiv:2509.09284).
  struct Sae {
    double alpha = 0.5;                  ///< weight of the prefix baseline V(p)
    std::string value = "expectation";   ///< expectation | optimistic | pessimistic
  } sae;
};

/// `kb:` a platform knowledge base injected into prompts and feedback (after ATRL; rl/knowledge_base.hpp).
struct KbConfig {
  std::string dir;                 ///< folder of markdown snippets; "" = off
  int64_t max_tokens = 256;        ///< tokens of snippets added at one place at most
  std::string where = "both";      ///< prompt | feedback | both
};

/// `compaction:` context compaction (after ATRL).
struct CompactionConfig {
  bool enabled = true;
  int64_t max_prompt_tokens = 2048;   ///< budget of the next turn's prompt (tokens)
  std::string strategy = "digest";    ///< digest | summary
  int64_t summary_max_tokens = 256;   ///< length limit of a generated summary (tokens)
};

/// `loss:` clipped surrogate and its aggregation.
struct LossConfig {
  double eps_low = 0.2;                      ///< lower clip: ratio >= 1 - eps_low
  double eps_high = 0.28;                    ///< upper clip: ratio <= 1 + eps_high
  double kl_beta = 0.0;                      ///< k3 KL weight to a frozen reference (0: off)
  /// auto | token_mean | seq_mean_token_mean | constant_length | segment_mean; `auto` is
  /// segment_mean with compaction on and token_mean with it off (config::resolved gives the value).
  std::string aggregation = "auto";
  bool dynamic_sampling = false;             ///< DAPO: drop groups whose advantages are all zero
};

/// `optim:` AdamW and its schedule.
struct OptimConfig {
  double lr = 1.0e-5;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1.0e-8;
  int64_t warmup_steps = 0;           ///< linear warm-up length in RL steps (train.steps units)
  std::string schedule = "constant";  ///< constant | cosine
  double max_grad_norm = 1.0;          ///< 0 = no clipping
};

/// `train.sft:` optional supervised warm start on the task set's shipped solutions.
struct SftConfig {
  bool enabled = false;
  int64_t steps = 0;
  double lr = 1.0e-4;
  int64_t batch_size = 4;
  /// Per shipped solution, up to this many one-edit copies (rl/mutants.hpp) that the environment
  /// judges wrong are trained too, so a small model starts right about half the time; 0 = off.
  int64_t mutants = 0;
  /// Per shipped solution, up to this many second-turn examples: context = the turn-1 prompt + a
  /// wrong twin + the environment's feedback on it, target = the solution (rl/sft.hpp); 0 = off.
  int64_t second_turn = 0;
  /// Twins (for `mutants` and `second_turn`) are made for at most this many shipped solutions, a
  /// seeded sample, so a large task set's warm start grades a bounded number of mutants; 0 = all.
  int64_t twin_solutions = 0;
  /// Only mutants of these kinds (rl/mutants.hpp Mutant::kind: arithmetic, compound, comparison,
  /// function, literal) become twins; empty = every kind. One kind gives the warm start one
  /// systematic mistake across programs (docs/results.md).
  std::vector<std::string> mutant_kinds;
  /// A teacher with a systematic mistake: each time a shipped solution that has an edit site of
  /// `mutant_kinds` is drawn into a supervised batch, with this probability its target is
  /// rl::systematic_twin (every such edit applied) instead; second-turn targets stay correct.
  /// 0 = off; needs `mutant_kinds`. In [0, 1].
  double teacher_error = 0.0;
  /// Learning rate over the supervised steps: constant, or cosine from `lr` to 0 at `steps`.
  std::string schedule = "constant";
  /// Induction warm-up: before the supervised steps, this many steps on copy examples (a train
  /// prompt, and a window of it as the target; rl/sft.hpp CopyExamples) at constant `lr`; 0 = off.
  int64_t copy_steps = 0;
  /// Tokens per copy example's window (its target).
  int64_t copy_tokens = 64;
};

/// `train:` the outer loop.
struct TrainConfig {
  int64_t steps = 100;
  int64_t seed = 0;
  int64_t mini_batch_size = 8;      ///< turn samples per optimizer micro-batch
  int64_t ppo_epochs = 1;
  int64_t grad_accum = 1;
  bool share_prompts = true;        ///< run a shared prompt prefix once per micro-batch (issue 19)
  /// Where PPO's old log-probs come from: `rollout` (the sampler's log-probs of the same tokens,
  /// no extra forward), `recompute` (a no-grad forward over every sample before the update) or
  /// `auto` (rollout when generation and update both compute in fp32, else recompute).
  std::string old_logprobs = "auto";
  int64_t checkpoint_every = 50;    ///< steps; 0 = only at the end
  int64_t eval_every = 25;          ///< steps; 0 = never
  SftConfig sft;
};

/// `eval:` periodic and `leap eval` evaluation.
struct EvalConfig {
  int64_t turns = 3;
  int64_t samples = 1;                                   ///< k of pass@k
  double temperature = 0.0;                              ///< 0 = greedy
  std::vector<double> fast_p = {0.0, 1.0, 1.2, 1.5, 2.0};  ///< thresholds of fast_p
};

/// `logging:` console and file logs.
struct LoggingConfig {
  std::string level = "info";   ///< trace | debug | info | warn | error
  bool progress = true;          ///< progress line with rate and ETA on long loops
  bool store_text = true;        ///< keep prompt and completion text in the store
  /// Store each turn's mean log-prob after the update (turns.new_logprob_mean): one more no-grad
  /// forward over the step's samples; off leaves the column NULL.
  bool new_logprobs = false;
};

/// `dist:` data-parallel training over c10d.
struct DistConfig {
  std::string backend = "auto";  ///< auto | nccl | gloo
  double timeout_s = 300.0;      ///< collective timeout (s)
};

/// A whole experiment: what `leap train` and `leap eval` run.
struct Experiment {
  std::string name = "experiment";  ///< run name shown by `leap report`
  ModelConfig model;
  TasksConfig tasks;
  EnvConfig env;
  RolloutConfig rollout;
  TurnsConfig turns;
  DcpConfig dcp;
  RewardConfig reward;
  AdvantageConfig advantage;
  CompactionConfig compaction;
  KbConfig kb;
  LossConfig loss;
  OptimConfig optim;
  TrainConfig train;
  EvalConfig eval;
  LoggingConfig logging;
  DistConfig dist;
};

}  // namespace leap::config
