#pragma once
// Benchmark metrics of DESIGN.md section 5 over plain attempt rows: compile rate, Acc@1..T, pass@k,
// fast_p, geometric-mean speedup, turns per pass, tokens per success, hack detections. Per level
// and overall. The one definition every figure uses: the trainer's periodic eval
// (rl/evaluate.hpp), `leap eval` and `leap report` fill MetricsInput from what they hold
// (report/store_input.hpp from the store). In util so that rl and report can both use it; std only.
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace leap::metrics {

/// One evaluated attempt: sample `sample` of task `task` at turn `turn`.
struct Attempt {
  std::string task;                   ///< task key (name; for training rows "step/group")
  int64_t sample = 0;                 ///< 0-based sample (trajectory) of the task
  int64_t turn = 1;                   ///< 1-based turn
  std::string verdict;                ///< format_error ... correct
  std::optional<double> speedup;      ///< reference time / candidate time, when measured
  int64_t tokens = 0;                 ///< generated tokens of this attempt
  bool suspicious = false;            ///< speedup flagged suspicious by the verifier
};

/// A task of the benchmark: every listed task counts, with or without attempts.
struct TaskRef {
  std::string task;
  std::optional<int64_t> level;
};

/// What the metrics are computed from. Tasks named only in `attempts` are added (no level).
struct MetricsInput {
  std::vector<TaskRef> tasks;
  std::vector<Attempt> attempts;
  int64_t turns = 0;  ///< T of Acc@1..T; 0: the highest turn in `attempts` (at least 1)
  std::vector<double> fast_p;  ///< thresholds p of fast_p; empty: kFastP
};

/// The default thresholds p of fast_p.
inline const std::vector<double> kFastP = {0.0, 1.0, 1.2, 1.5, 2.0};

/// Metrics of one slice (a level, or all tasks). Shares are in [0, 1]; NaN where undefined.
struct Metrics {
  int64_t tasks = 0;             ///< tasks in the slice (with or without attempts)
  int64_t trajectories = 0;      ///< (task, sample) pairs seen
  int64_t attempts = 0;          ///< attempts (all turns)
  double compile_rate = NAN;     ///< attempts past compilation (not format_error / compile_error) / attempts
  std::vector<double> acc;       ///< acc[t-1] = Acc@t: mean over tasks of the share of samples correct by turn t
  std::map<int64_t, double> pass_at_k;  ///< k -> mean over tasks of the unbiased pass@k (n samples, c correct)
  std::map<double, double> fast_p;      ///< p -> mean over tasks of the share of samples correct with speedup > p
  double geomean_speedup = NAN;  ///< geometric mean over correct trajectories of their best speedup
  double turns_per_pass = NAN;   ///< mean first-correct turn over correct trajectories
  double tokens_per_success = NAN;  ///< all generated tokens / correct trajectories (NaN when no tokens were counted)
  std::map<std::string, int64_t> hacks;  ///< kind -> count: inputs_modified, suspicious_speedup
  /// Attempts whose verdict is `infra_error` (the environment failed, not the answer). Their
  /// trajectories are void: left out of every other figure, as training leaves them unscored.
  int64_t infra_errors = 0;
};

/// Overall metrics and one entry per level ("-" for tasks without a level).
struct MetricsReport {
  Metrics overall;
  std::map<std::string, Metrics> by_level;  ///< "1", "2", ... , "-"
  int64_t turns = 1;                        ///< the T used
  int64_t samples = 1;                      ///< the most samples any task has (k of pass@k)
};

/// Unbiased pass@k estimator 1 - C(n - c, k) / C(n, k) for n samples of which c are correct
/// (Chen et al. 2021). Returns NaN when k > n or n == 0. Throws leap::Error when c > n or k < 1.
double pass_at_k(int64_t n, int64_t c, int64_t k);

/// Computes every metric. A trajectory with an `infra_error` attempt is void: only counted in
/// `infra_errors` (so a task whose samples are all void counts as having none). A trajectory is
/// correct by turn t if one of its attempts with
/// turn <= t is `correct`; its speedup is the best speedup of its correct attempts; fast_0 counts
/// correct trajectories whatever their speedup, fast_p (p > 0) needs a measured speedup > p.
/// Tasks without attempts count as failures everywhere a share is taken over tasks.
/// pass@k is reported for k = 1 and k = the most samples of any task, averaged over the tasks with
/// >= k samples and the tasks without any (those count 0).
MetricsReport compute_metrics(const MetricsInput& input);

}  // namespace leap::metrics
