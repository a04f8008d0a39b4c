#pragma once
// Plain structs the Store writes and reads. Units: times are Unix seconds (UTC, see clock.hpp),
// durations are seconds, kernel times are milliseconds, indices are 0-based except turns (1-based).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::store {

/// What a run is for.
enum class RunKind { train, eval };
/// Lifecycle of a run: `running` until finish_run sets one of the others.
enum class RunStatus { running, finished, failed, interrupted };

/// "train" / "eval".
std::string_view to_string(RunKind kind);
/// "running" / "finished" / "failed" / "interrupted".
std::string_view to_string(RunStatus status);
/// Inverse of to_string; throws leap::StoreError on an unknown name.
RunKind parse_run_kind(std::string_view s);
/// Inverse of to_string; throws leap::StoreError on an unknown name.
RunStatus parse_run_status(std::string_view s);

/// Who is writing a run: its lease (schema v3). The writer refreshes it per step; another
/// process may take the run over only when the holder is gone (see Store::acquire_lease).
struct RunLease {
  std::string host;                 ///< hostname of the writing process
  std::int64_t pid = 0;             ///< its process id on that host
  double process_started_at = 0;    ///< its start time (Unix seconds), which tells a reused pid apart
  double refreshed_at = 0;          ///< last refresh (Unix seconds)
};

/// A new run, as given to Store::create_run.
struct RunInfo {
  std::string id;           ///< empty: generate one with make_run_id (the usual case)
  std::string name;         ///< human name (usually the experiment name from the config)
  RunKind kind = RunKind::train;
  std::string config_yaml;  ///< the resolved config (after --set overrides), as YAML text
  std::string config_hash;  ///< hash of config_yaml, to group identical configs
  std::int64_t seed = 0;
  std::string git_commit;   ///< commit of the leap binary that ran it
  std::string hostname;
  std::optional<double> started_at;  ///< Unix seconds; empty: now
  std::optional<RunLease> lease;     ///< the creating process's lease (leap train), if any
};

/// A run as stored.
struct RunRow {
  std::string id;
  std::string name;
  RunKind kind = RunKind::train;
  RunStatus status = RunStatus::running;
  std::string config_yaml;
  std::string config_hash;
  std::int64_t seed = 0;
  std::string git_commit;
  std::string hostname;
  double started_at = 0;             ///< Unix seconds
  std::optional<double> ended_at;    ///< Unix seconds; empty while running
};

/// Identity of a task; rows are shared by all runs and deduplicated on (task_set, name, hash).
struct TaskInfo {
  std::string task_set;               ///< e.g. "kernelbench-l1" or the tasks/<set> folder name
  std::string name;                   ///< e.g. "softmax_rows"
  std::optional<std::int64_t> level;  ///< KernelBench-style level
  std::optional<std::string> category;
  std::string hash;                   ///< content hash of the task spec (an edited task is a new row)
};

/// One turn of one rollout: the sample, the environment's verdict and the RL quantities.
struct TurnRecord {
  std::int64_t turn_index = 1;     ///< 1-based turn number (the node's depth in a debugging tree)
  std::int64_t node_index = 0;     ///< 0-based position among the rollout's graded turns (unique per rollout)
  std::optional<std::int64_t> parent_index;  ///< node_index of the turn this one continues; empty at turn 1
  std::int64_t segment_index = 0;  ///< 0-based compaction segment the turn belongs to
  std::string prompt;              ///< full prompt text the model saw
  std::string completion;          ///< generated text
  std::int64_t prompt_tokens = 0;
  std::int64_t completion_tokens = 0;
  std::string verdict;             ///< format_error ... correct, or infra_error (DESIGN.md section 3, docs/env.md)
  std::string feedback;            ///< feedback text shown to the next turn
  std::optional<double> candidate_ms;  ///< median candidate time, milliseconds (correct only)
  std::optional<double> reference_ms;  ///< median reference time, milliseconds
  std::optional<double> speedup;       ///< reference_ms / candidate_ms
  bool suspicious = false;             ///< speedup above timing.suspicious_speedup, re-measured
  double reward = 0;                   ///< per-turn reward R_t
  double discounted_return = 0;        ///< G_t = sum_{k>=t} gamma^(k-t) R_k
  double advantage = 0;                ///< advantage applied to this turn's tokens
  std::optional<double> old_logprob_mean;  ///< mean per-token log-prob before the update (nats)
  std::optional<double> new_logprob_mean;  ///< mean per-token log-prob after the update (nats)
  double env_seconds = 0;              ///< wall seconds the environment spent on this turn
  bool compacted = false;              ///< this turn's prompt was compacted
  std::string kb_snippets;             ///< knowledge-base snippet ids this turn's prompt added, comma-separated
};

/// One rollout (trajectory) of a group.
struct RolloutRecord {
  std::int64_t rollout_index = 0;                ///< 0-based position in the group
  std::string final_verdict;                     ///< verdict of the last turn
  std::optional<std::int64_t> first_success_turn;  ///< k_i; empty when never correct
  double reward = 0;                             ///< reward of the configured reward.kind
  std::optional<double> advantage;               ///< rollout-level advantage (before turn credit)
  std::optional<double> reward_rank;             ///< each reward kind, where computed
  std::optional<double> reward_binary;
  std::optional<double> reward_speedup;
  std::optional<double> reward_kernelgym;
  std::vector<TurnRecord> turns;
};

/// One GRPO group: G rollouts of one task.
struct GroupRecord {
  TaskInfo task;
  std::int64_t group_index = 0;  ///< 0-based position in the step's batch
  bool dcp_activated = false;    ///< DCP expanded this group to debugging turns
  double fail_ratio_turn1 = 0;   ///< failed rollouts at turn 1 / G, in [0, 1]
  std::int64_t recovered = 0;    ///< rollouts failed at turn 1 that later succeeded
  std::vector<RolloutRecord> rollouts;
};

/// A named scalar. A NaN value is stored as NULL and read back as NaN.
struct MetricRecord {
  std::string name;
  double value = 0;
  std::optional<double> wall_time;  ///< Unix seconds; empty: now
};

/// A log line worth keeping with the run (restart, suspicious speedup, worker crash...).
struct EventRecord {
  std::string kind;
  std::string message;
  std::optional<double> time;  ///< Unix seconds; empty: now
};

/// Everything one training step produced; Store::write_step writes it in one transaction.
struct StepRecord {
  std::string run_id;
  std::int64_t step = 0;           ///< 1-based step number
  double started_at = 0;           ///< Unix seconds
  double ended_at = 0;             ///< Unix seconds
  double generation_seconds = 0;   ///< wall seconds in sampling
  double env_seconds = 0;          ///< wall seconds waiting for the environment
  double update_seconds = 0;       ///< wall seconds in the policy update
  std::vector<GroupRecord> groups;
  std::vector<MetricRecord> metrics;  ///< stored with this step's number
  std::vector<EventRecord> events;    ///< stored with this step's number
};

/// An evaluation (a `leap eval` or a periodic eval during training).
struct EvaluationInfo {
  std::optional<std::string> run_id;  ///< owning run, if any
  std::optional<std::int64_t> step;   ///< training step evaluated, if any
  std::string bench;                  ///< benchmark / task-set name
  std::string settings_json = "{}";   ///< sampling and env settings, JSON text
  std::optional<double> created_at;   ///< Unix seconds; empty: now
};

/// One evaluated sample at one turn.
struct EvalResultRecord {
  TaskInfo task;
  std::int64_t sample = 0;  ///< 0-based sample number for the task
  std::int64_t turn = 1;    ///< 1-based turn
  std::string verdict;
  std::optional<double> speedup;
  std::optional<double> candidate_ms;  ///< milliseconds
  std::optional<double> reference_ms;  ///< milliseconds
  std::optional<std::string> file;     ///< path of the saved solution, if kept
  bool suspicious = false;  ///< speedup above timing.suspicious_speedup after re-measuring (a possible hack)
};

/// One point of a metric series.
struct MetricPoint {
  std::int64_t step = 0;
  double value = 0;      ///< NaN where NULL was stored
  double wall_time = 0;  ///< Unix seconds
};

/// A stored checkpoint.
struct CheckpointRow {
  std::int64_t id = 0;
  std::string run_id;
  std::int64_t step = 0;
  std::string path;
  double created_at = 0;  ///< Unix seconds
};

}  // namespace leap::store
