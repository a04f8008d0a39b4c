#include "rl/step_record.hpp"

#include <cmath>
#include <filesystem>
#include <set>

#include "env/task_runtime.hpp"

namespace leap::rl {

namespace {

/// The rollout's last verdict: its last turn's for a chain; for a tree (an attempt with several
/// children) "correct" when any node passed, else the last graded node's.
std::string final_verdict(const RolloutResult& ro) {
  if (ro.turns.empty()) return "format_error";
  std::set<int> parents;
  bool tree = false;
  for (const auto& t : ro.turns)
    if (t.parent >= 0 && !parents.insert(t.parent).second) tree = true;
  if (tree && ro.first_success() > 0) return "correct";
  return std::string(env::to_string(ro.turns.back().result.verdict));
}

}  // namespace

store::TaskInfo task_info(const std::string& task_set, const tasks::TaskSpec& spec) {
  store::TaskInfo t;
  t.task_set = task_set;
  t.name = spec.name;
  t.level = spec.level;
  if (!spec.category.empty()) t.category = spec.category;
  t.hash = spec.hash;
  return t;
}

std::optional<double> finite_or_empty(double v) { return std::isfinite(v) ? std::optional<double>(v) : std::nullopt; }

std::vector<store::GroupRecord> group_records(const std::vector<GroupResult>& groups,
                                              const std::vector<std::vector<ScoredRollout>>& scored,
                                              const std::vector<const env::RuntimeTask*>& tasks,
                                              const std::string& task_set, const LogprobMeans& means,
                                              bool store_text) {
  std::vector<store::GroupRecord> out;
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& gr = groups[g];
    store::GroupRecord grec;
    grec.task = task_info(task_set, tasks[gr.task_index]->spec());
    grec.group_index = static_cast<int64_t>(g);
    grec.dcp_activated = gr.dcp.expand;
    grec.fail_ratio_turn1 = gr.dcp.fail_ratio;
    grec.recovered = gr.recovered;
    for (size_t i = 0; i < gr.rollouts.size(); ++i) {
      const auto& ro = gr.rollouts[i];
      const auto& sc = scored[g][i];
      store::RolloutRecord rr;
      rr.rollout_index = static_cast<int64_t>(i);
      rr.final_verdict = final_verdict(ro);
      if (ro.first_success() > 0) rr.first_success_turn = ro.first_success();
      rr.reward = sc.reward;
      rr.advantage = sc.advantage;
      if (std::isfinite(sc.reward_rank)) rr.reward_rank = sc.reward_rank;  // NaN: not defined (tree scoring)
      rr.reward_binary = sc.reward_binary;
      rr.reward_speedup = sc.reward_speedup;
      rr.reward_kernelgym = sc.reward_kernelgym;
      for (size_t t = 0; t < ro.turns.size(); ++t) {
        const auto& tr = ro.turns[t];
        store::TurnRecord trec;
        trec.turn_index = tr.turn;
        trec.node_index = static_cast<int64_t>(t);
        if (tr.parent >= 0) trec.parent_index = tr.parent;
        trec.segment_index = tr.segment;
        if (store_text) {
          trec.prompt = tr.prompt_text;
          trec.completion = tr.sample.text;
        }
        trec.prompt_tokens = static_cast<int64_t>(tr.sample.prompt_ids.size());
        trec.completion_tokens = static_cast<int64_t>(tr.sample.completion_ids.size());
        trec.verdict = std::string(env::to_string(tr.result.verdict));
        trec.feedback = tr.result.feedback;
        trec.candidate_ms = finite_or_empty(tr.result.candidate_ms);
        trec.reference_ms = finite_or_empty(tr.result.reference_ms);
        trec.speedup = finite_or_empty(tr.result.speedup);
        trec.suspicious = tr.result.suspicious;
        trec.reward = sc.turn_rewards[t];
        trec.discounted_return = sc.turn_returns[t];
        trec.advantage = sc.turn_advantages[t];
        auto it = means.find({g, i, t});
        if (it != means.end()) {
          trec.old_logprob_mean = it->second.first;
          trec.new_logprob_mean = it->second.second;
        }
        trec.env_seconds = tr.env_seconds;
        trec.compacted = tr.compacted;
        for (const auto& id : tr.kb_snippets) trec.kb_snippets += (trec.kb_snippets.empty() ? "" : ",") + id;
        rr.turns.push_back(std::move(trec));
      }
      grec.rollouts.push_back(std::move(rr));
    }
    out.push_back(std::move(grec));
  }
  return out;
}

std::string answer_file(const std::string& task, int64_t sample, int64_t turn) {
  return task + "/s" + std::to_string(sample) + "_t" + std::to_string(turn) + ".md";
}

std::vector<store::EvalResultRecord> eval_result_records(const std::vector<GroupResult>& groups,
                                                         const std::vector<const env::RuntimeTask*>& tasks,
                                                         const std::string& task_set, const std::string& answers_dir,
                                                         std::vector<std::pair<std::string, std::string>>* answers) {
  std::vector<store::EvalResultRecord> rows;
  for (const auto& g : groups) {
    const auto& spec = tasks[g.task_index]->spec();
    for (size_t i = 0; i < g.rollouts.size(); ++i)
      for (const auto& t : g.rollouts[i].turns) {
        store::EvalResultRecord rec;
        rec.task = task_info(task_set, spec);
        rec.sample = static_cast<int64_t>(i);
        rec.turn = t.turn;
        rec.verdict = std::string(env::to_string(t.result.verdict));
        rec.speedup = finite_or_empty(t.result.speedup);
        rec.candidate_ms = finite_or_empty(t.result.candidate_ms);
        rec.reference_ms = finite_or_empty(t.result.reference_ms);
        rec.suspicious = t.result.suspicious;
        if (!answers_dir.empty()) {
          const std::string rel = answer_file(spec.name, rec.sample, rec.turn);
          rec.file = (std::filesystem::path(answers_dir) / rel).string();
          if (answers) answers->emplace_back(rel, t.sample.text);
        }
        rows.push_back(std::move(rec));
      }
  }
  return rows;
}

}  // namespace leap::rl
