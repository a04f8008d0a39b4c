#include "rl/rollout.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <set>
#include <tuple>

#include "env/task_runtime.hpp"
#include "rl/compaction.hpp"
#include "rl/knowledge_base.hpp"
#include "rl/prompts.hpp"
#include "util/hash.hpp"

namespace leap::rl {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// One attempt about to be generated: where in which rollout it goes and what it continues.
struct Live {
  size_t group = 0;
  size_t index = 0;      ///< rollout index in the group
  int parent = -1;       ///< graded turn it continues (index into the rollout's turns); -1 at turn 1
  Prompt context;        ///< messages it continues (before compaction)
  int segment = 0;
  std::vector<std::string> kb_added;  ///< knowledge-base snippets its prompt added
  std::set<std::string> kb_shown;     ///< ... and those its whole context holds
};

/// Appends the knowledge-base snippets to the context's last (user) message and records them.
void add_snippets(Live& l, const std::vector<const KbSnippet*>& snippets) {
  if (snippets.empty()) return;
  l.context.back().content += "\n\n" + kb_text(snippets);
  for (const KbSnippet* s : snippets) l.kb_added.push_back(s->id), l.kb_shown.insert(s->id);
}

/// A compact record rebuilds the context from the task and the attempts, without notes: the
/// notes this turn's prompt added (after the latest feedback) are appended to it again, and only
/// they are in the context now (earlier ones may be retrieved again later).
void keep_latest_notes(std::vector<Live>& live, const std::vector<PendingTurn>& pending, const KnowledgeBase& kb) {
  for (size_t a = 0; a < live.size(); ++a) {
    if (!pending[a].compacted) continue;
    Live& l = live[a];
    std::vector<const KbSnippet*> notes;
    for (const auto& id : l.kb_added)
      if (const KbSnippet* s = kb.find(id)) notes.push_back(s);
    l.kb_added.clear();
    l.kb_shown.clear();
    add_snippets(l, notes);
  }
}

}  // namespace

std::string Policy::render(const Prompt& prompt) {
  std::string s;
  for (const auto& m : prompt) s += m.role + ":\n" + m.content + "\n";
  return s;
}

int RolloutResult::first_success() const {
  for (const auto& t : turns)
    if (t.result.is_correct()) return t.turn;
  return 0;
}

bool RolloutResult::infra_error() const {
  for (const auto& t : turns)
    if (t.result.is_infra_error()) return true;
  return false;
}

int64_t RolloutResult::completion_tokens() const {
  int64_t n = 0;
  for (const auto& t : turns) n += static_cast<int64_t>(t.sample.completion_ids.size());
  for (const auto& t : summaries) n += static_cast<int64_t>(t.sample.completion_ids.size());
  return n;
}

RolloutEngine::RolloutEngine(Policy& policy, Grader& grader, EngineOptions options)
    : policy_(policy), grader_(grader), options_(std::move(options)) {}

namespace {

/// The most graded turns the subtree of one failed turn-1 attempt could take: branch + branch^2 +
/// ... + branch^(T-1) (T - 1 for a chain).
int64_t subtree_turns(int branch, int T) {
  int64_t total = 0, level = 1;
  for (int t = 2; t <= T; ++t) {
    level = std::min<int64_t>(level * branch, int64_t{1} << 40);
    total += level;
  }
  return total;
}

/// DCP (LEAP, DESIGN.md section 4), the one place the gate is applied: after turn 1 each group's
/// failure ratio goes through dcp_decide; the children of a group not expanded are dropped, and
/// its turn-1 failures count the turns their subtrees could have taken as saved env calls (within
/// the group's env-call cap).
void apply_dcp(std::vector<GroupResult>& groups, std::vector<Live>& next, int group_size, const EngineOptions& o,
               EngineStats& st) {
  const int T = std::max(1, o.max_turns);
  for (auto& g : groups) {
    int failed = 0;
    for (const auto& ro : g.rollouts)
      if (!ro.turns.empty() && !ro.turns.front().result.is_correct() && !ro.turns.front().result.is_infra_error())
        ++failed;  // (an infrastructure error is not the answer's failure)
    g.failed_turn1 = failed;
    g.dcp = dcp_decide(failed, group_size, o.dcp);
    if (T <= 1) g.dcp.expand = false;  // no debugging turn to give: nothing is activated
    if (!g.dcp.expand && T > 1) {
      int64_t saved = failed * subtree_turns(std::max(1, o.branch), T);
      if (o.max_env_calls > 0) saved = std::min<int64_t>(saved, std::max<int64_t>(0, o.max_env_calls - group_size));
      g.env_calls_saved = static_cast<int>(saved);
      st.env_calls_saved += g.env_calls_saved;
    }
  }
  std::erase_if(next, [&](const Live& l) { return !groups[l.group].dcp.expand; });
}

/// The next turn's attempts: `branch` children of each expandable attempt, round-robin over a
/// group's attempts (first children first) while the group stays within max_env_calls.
std::vector<Live> expand(const std::vector<Live>& expandable, size_t num_groups, const std::vector<int64_t>& calls,
                         const EngineOptions& o) {
  std::vector<std::vector<const Live*>> by_group(num_groups);
  for (const auto& l : expandable) by_group[l.group].push_back(&l);
  std::vector<Live> next;
  for (size_t g = 0; g < num_groups; ++g) {
    int64_t budget = o.max_env_calls > 0 ? std::max<int64_t>(0, o.max_env_calls - calls[g]) : INT64_MAX;
    for (int c = 0; c < std::max(1, o.branch); ++c)
      for (const Live* l : by_group[g])
        if (budget > 0) next.push_back(*l), --budget;
  }
  // Keep the rollouts' order (group, rollout, parent) so a chain batches exactly as before.
  std::stable_sort(next.begin(), next.end(), [](const Live& a, const Live& b) {
    return std::tie(a.group, a.index, a.parent) < std::tie(b.group, b.index, b.parent);
  });
  return next;
}

}  // namespace

std::vector<GroupResult> RolloutEngine::run(const std::vector<const env::RuntimeTask*>& tasks, int group_size,
                                            uint64_t seed, EngineStats* stats) {
  EngineStats local;
  EngineStats& st = stats ? *stats : local;
  std::vector<GroupResult> groups(tasks.size());
  std::vector<Live> live;
  const KnowledgeBase* kb = options_.kb.get();
  const auto tokens = [&](const std::string& text) { return policy_.count_tokens({{"user", text}}); };
  for (size_t g = 0; g < tasks.size(); ++g) {
    groups[g].task_index = g;
    groups[g].rollouts.resize(static_cast<size_t>(group_size));
    std::vector<const KbSnippet*> notes;  // the task's snippets (ATRL's knowledge base), once per group
    if (kb && options_.kb_options.prompt)
      notes = fit_budget(kb->for_task(tasks[g]->spec(), options_.backend), options_.kb_options.max_tokens, tokens);
    for (int i = 0; i < group_size; ++i) {
      Live l;
      l.group = g;
      l.index = static_cast<size_t>(i);
      l.context = first_turn_messages(tasks[g]->spec(), options_.backend);
      add_snippets(l, notes);
      live.push_back(std::move(l));
    }
  }
  std::vector<int64_t> calls(tasks.size(), 0);  // graded turns per group
  const int T = std::max(1, options_.max_turns);
  for (int turn = 1; turn <= T && !live.empty(); ++turn) {
    // Compaction (rl/compaction.hpp): contexts over the budget become compact records.
    std::vector<PendingTurn> pending;
    for (auto& l : live)
      pending.push_back({&tasks[l.group]->spec(), &groups[l.group].rollouts[l.index], &l.context, &l.segment, false,
                         l.parent, -1});
    compact_context(policy_, pending, turn, options_, seed, st);
    if (kb) keep_latest_notes(live, pending, *kb);

    // Generation: every attempt of this turn in one batched call.
    std::vector<Prompt> prompts;
    for (const auto& l : live) prompts.push_back(l.context);
    SampleOptions so = options_.sampling;
    so.seed = util::mix_seed(util::mix_seed(seed, static_cast<uint64_t>(turn)), 0x1u);
    auto t0 = Clock::now();
    auto samples = policy_.generate(prompts, so);
    st.generation_seconds += seconds_since(t0);

    // Grading: one call for the batch.
    std::vector<GradeRequest> requests;
    for (size_t a = 0; a < live.size(); ++a) requests.push_back({tasks[live[a].group], samples[a].text});
    t0 = Clock::now();
    auto results = grader_.grade(requests);
    const double env_s = seconds_since(t0);
    st.env_seconds += env_s;
    st.env_calls += static_cast<int64_t>(requests.size());

    // Record each turn; its children continue its context, reasoning dropped, feedback appended.
    std::vector<Live> expandable;
    for (size_t a = 0; a < live.size(); ++a) {
      Live& l = live[a];
      auto& ro = groups[l.group].rollouts[l.index];
      calls[l.group] += 1;
      TurnResult tr;
      tr.turn = turn;
      tr.parent = l.parent;
      tr.segment = l.segment;
      tr.compacted = pending[a].compacted;
      tr.prompt = prompts[a];
      tr.prompt_text = policy_.render(prompts[a]);
      tr.sample = std::move(samples[a]);
      tr.result = std::move(results[a]);
      tr.env_seconds = env_s / static_cast<double>(live.size());
      tr.kb_snippets = l.kb_added;
      if (pending[a].summary >= 0 && ro.summaries[static_cast<size_t>(pending[a].summary)].next_turn < 0)
        ro.summaries[static_cast<size_t>(pending[a].summary)].next_turn = static_cast<int>(ro.turns.size());  // siblings share it: the first
      const bool correct = tr.result.is_correct();
      const bool infra = tr.result.is_infra_error();  // the environment failed: the attempt stops, void
      if (turn < T && !infra && (!correct || options_.refine_after_success)) {
        Live child{l.group, l.index, static_cast<int>(ro.turns.size()), {}, l.segment, {}, l.kb_shown};
        child.context = next_turn_context(prompts[a], tr.sample.text, env::to_string(tr.result.verdict),
                                          tr.result.feedback, tr.result.speedup);
        if (kb && options_.kb_options.feedback)
          add_snippets(child, fit_budget(kb->for_feedback(tasks[l.group]->spec(), options_.backend,
                                                          env::to_string(tr.result.verdict), tr.result.feedback,
                                                          l.kb_shown),
                                         options_.kb_options.max_tokens, tokens));
        expandable.push_back(std::move(child));
      }
      ro.turns.push_back(std::move(tr));
    }
    live = expand(expandable, groups.size(), calls, options_);

    // DCP after turn 1: which groups go on to debugging turns.
    if (turn == 1) apply_dcp(groups, live, group_size, options_, st);
  }
  for (auto& g : groups)
    for (const auto& ro : g.rollouts)
      if (!ro.turns.empty() && !ro.turns.front().result.is_correct() && ro.first_success() > 1) g.recovered += 1;
  return groups;
}

}  // namespace leap::rl
