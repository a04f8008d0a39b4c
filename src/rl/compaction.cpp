// Context compaction (DESIGN.md section 4, "Compaction").
#include "rl/compaction.hpp"

#include <algorithm>
#include <chrono>

#include "rl/prompts.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"

namespace leap::rl {

Prompt compact_record(const tasks::TaskSpec& spec, const std::string& backend, const std::string& strategy,
                      const std::vector<TurnResult>& turns, const std::string& summary) {
  if (turns.empty()) throw Error("compact_record: a rollout with no graded turn has nothing to compact");
  std::string body = task_message(spec, backend);
  const auto& last = turns.back();
  if (strategy == "summary") {
    body += "\nSummary of your earlier attempts:\n" + summary + "\n";
  } else {
    // The attempts before the latest, one verdict line each; the latest appears once, as its
    // code here and its verdict with the whole feedback below. Keeping the one text that differs
    // between rollouts with the same program (the feedback's numbers) after the code lets such
    // rollouts' contexts share every token up to it (prompt sharing, docs/training.md).
    if (turns.size() > 1) body += "\nYour earlier attempts:\n";
    for (size_t k = 0; k + 1 < turns.size(); ++k)
      body += digest_line(turns[k].turn, env::to_string(turns[k].result.verdict), turns[k].result.feedback) + "\n";
    body += "\nYour latest attempt (attempt " + std::to_string(last.turn) + "):\n" + strip_think(last.sample.text) + "\n";
  }
  body += "\n" + feedback_message(env::to_string(last.result.verdict), last.result.feedback, last.result.speedup);
  return {{"system", system_prompt(backend)}, {"user", body}};
}

std::vector<TurnResult> ancestor_path(const RolloutResult& rollout, int parent) {
  std::vector<TurnResult> path;
  for (int n = parent; n >= 0; n = rollout.turns[static_cast<size_t>(n)].parent) {
    if (n >= static_cast<int>(rollout.turns.size()) || (!path.empty() && rollout.turns[static_cast<size_t>(n)].turn >= path.back().turn))
      throw Error("ancestor_path: turn index " + std::to_string(n) + " is not an earlier turn of the rollout (" +
                  std::to_string(rollout.turns.size()) + " turns)");
    path.push_back(rollout.turns[static_cast<size_t>(n)]);
  }
  std::reverse(path.begin(), path.end());
  return path;
}

void compact_context(Policy& policy, std::vector<PendingTurn>& pending, int turn, const EngineOptions& options,
                     uint64_t seed, EngineStats& stats) {
  if (!options.compaction || turn <= 1) return;
  // Over the budget: these are compacted. Siblings of a debugging tree (same rollout, same
  // parent, so the same context) are compacted once and share the record (and its summary).
  std::vector<size_t> over;
  std::vector<int64_t> before;
  std::vector<std::pair<size_t, size_t>> siblings;  // (sibling, the pending turn compacted for it)
  for (size_t p = 0; p < pending.size(); ++p) {
    bool shared = false;
    for (size_t q : over)
      if (pending[q].rollout == pending[p].rollout && pending[q].parent == pending[p].parent &&
          *pending[q].segment == *pending[p].segment && *pending[q].context == *pending[p].context) {
        siblings.emplace_back(p, q), shared = true;
        break;
      }
    if (shared) continue;
    const int64_t n = policy.count_tokens(*pending[p].context);
    if (n > options.max_prompt_tokens) over.push_back(p), before.push_back(n);
  }
  if (over.empty()) return;

  // Strategy summary: the policy summarises each context first (one batched call).
  std::vector<std::string> summaries(over.size());
  if (options.compaction_strategy == "summary") {
    std::vector<Prompt> requests;
    for (size_t p : over) {
      Prompt r = *pending[p].context;
      r.push_back({"user", summary_request()});
      requests.push_back(std::move(r));
    }
    SampleOptions so = options.sampling;
    so.max_new_tokens = options.summary_max_tokens;
    so.seed = util::mix_seed(util::mix_seed(seed, static_cast<uint64_t>(turn)), 0x5u);
    const auto t0 = std::chrono::steady_clock::now();
    auto samples = policy.generate(requests, so);
    stats.generation_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (size_t k = 0; k < over.size(); ++k) {
      PendingTurn& p = pending[over[k]];
      TurnResult tr;
      tr.turn = turn;
      tr.segment = *p.segment;
      tr.is_summary = true;
      tr.prompt = requests[k];
      tr.prompt_text = policy.render(requests[k]);
      tr.sample = std::move(samples[k]);
      summaries[k] = strip_think(tr.sample.text);
      p.summary = static_cast<int>(p.rollout->summaries.size());
      p.rollout->summaries.push_back(std::move(tr));
    }
  }

  // The compact record replaces the context and opens a new segment.
  for (size_t k = 0; k < over.size(); ++k) {
    PendingTurn& p = pending[over[k]];
    *p.context = compact_record(*p.spec, options.backend, options.compaction_strategy,
                                ancestor_path(*p.rollout, p.parent), summaries[k]);
    const int64_t saved = std::max<int64_t>(0, before[k] - policy.count_tokens(*p.context));
    *p.segment += 1;
    p.compacted = true;
    p.rollout->compactions += 1;
    p.rollout->tokens_saved += saved;
    stats.compaction_events += 1;
    stats.tokens_saved += saved;
  }
  for (const auto& [p, q] : siblings) {
    *pending[p].context = *pending[q].context;
    *pending[p].segment = *pending[q].segment;
    pending[p].compacted = true;
    pending[p].summary = pending[q].summary;
  }
}

}  // namespace leap::rl
