#pragma once
// The store rows of one step (groups -> rollouts -> turns) from the engine's results and their
// scores. Kept apart from the trainer so a test can check the rows of a scripted rollout.
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "rl/rollout.hpp"
#include "rl/scoring.hpp"
#include "store/records.hpp"
#include "tasks/task_spec.hpp"

namespace leap::rl {

/// (group, rollout, turn index 0-based) -> (old, new) mean per-token log-prob of the turn's
/// training sample (nats); new is empty when not computed (logging.new_logprobs off). Turns that
/// were not trained have no entry.
using LogprobMeans =
    std::map<std::tuple<size_t, size_t, size_t>, std::pair<double, std::optional<double>>>;

/// The store identity of a task of set `task_set`.
store::TaskInfo task_info(const std::string& task_set, const tasks::TaskSpec& spec);

/// `v` if finite, else empty (NULL in the store).
std::optional<double> finite_or_empty(double v);

/// One GroupRecord per group: DCP decision, every rollout with all reward components and its
/// advantage, every turn with text (when `store_text`), tokens, verdict, feedback, timings,
/// reward, return, advantage, log-prob means and compaction segment. `tasks[g]` is group g's task.
std::vector<store::GroupRecord> group_records(const std::vector<GroupResult>& groups,
                                              const std::vector<std::vector<ScoredRollout>>& scored,
                                              const std::vector<const env::RuntimeTask*>& tasks,
                                              const std::string& task_set, const LogprobMeans& means,
                                              bool store_text);

/// The path of an answer inside a `leap eval --save-answers` folder, the layout `leap eval
/// --solutions` reads: "<task>/s<sample>_t<turn>.md".
std::string answer_file(const std::string& task, int64_t sample, int64_t turn);

/// One eval_results row per graded turn of every rollout (sample = rollout index, turn 1-based).
/// With `answers_dir` not empty, each row's `file` is answers_dir / answer_file(...) and, when
/// `answers` is given, (answer_file(...), the answer's text) is appended to it for every row.
std::vector<store::EvalResultRecord> eval_result_records(
    const std::vector<GroupResult>& groups, const std::vector<const env::RuntimeTask*>& tasks,
    const std::string& task_set, const std::string& answers_dir = {},
    std::vector<std::pair<std::string, std::string>>* answers = nullptr);

}  // namespace leap::rl
