#include "rl/rollout.hpp"

#include <chrono>

#include "env/task_runtime.hpp"
#include "rl/compaction.hpp"
#include "rl/prompts.hpp"
#include "util/hash.hpp"

namespace leap::rl {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Where one rollout stands between turns.
struct Live {
  size_t group = 0;
  size_t index = 0;      ///< rollout index in the group
  bool active = true;
  Prompt context;        ///< messages the next turn continues (before compaction)
  int segment = 0;
};

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

/// DCP (LEAP, DESIGN.md section 4), the one place the gate is applied: after turn 1 each group's
/// failure ratio goes through dcp_decide; the rollouts of a group not expanded stop here, and
/// its turn-1 failures count (T - 1) saved env calls each.
void apply_dcp(std::vector<GroupResult>& groups, std::vector<Live>& live, int group_size, int T,
               const DcpOptions& options, EngineStats& st) {
  for (auto& g : groups) {
    int failed = 0;
    for (const auto& ro : g.rollouts)
      if (!ro.turns.empty() && !ro.turns.front().result.is_correct() && !ro.turns.front().result.is_infra_error())
        ++failed;  // (an infrastructure error is not the answer's failure)
    g.failed_turn1 = failed;
    g.dcp = dcp_decide(failed, group_size, options);
    if (T <= 1) g.dcp.expand = false;  // no debugging turn to give: nothing is activated
    if (!g.dcp.expand && T > 1) {
      g.env_calls_saved = failed * (T - 1);
      st.env_calls_saved += g.env_calls_saved;
    }
  }
  for (auto& l : live)
    if (l.active && !groups[l.group].dcp.expand) l.active = false;
}

}  // namespace

std::vector<GroupResult> RolloutEngine::run(const std::vector<const env::RuntimeTask*>& tasks, int group_size,
                                            uint64_t seed, EngineStats* stats) {
  EngineStats local;
  EngineStats& st = stats ? *stats : local;
  std::vector<GroupResult> groups(tasks.size());
  std::vector<Live> live;
  for (size_t g = 0; g < tasks.size(); ++g) {
    groups[g].task_index = g;
    groups[g].rollouts.resize(static_cast<size_t>(group_size));
    for (int i = 0; i < group_size; ++i) {
      Live l;
      l.group = g;
      l.index = static_cast<size_t>(i);
      l.context = first_turn_messages(tasks[g]->spec(), options_.backend);
      live.push_back(std::move(l));
    }
  }
  const int T = std::max(1, options_.max_turns);
  for (int turn = 1; turn <= T; ++turn) {
    std::vector<size_t> active;
    for (size_t r = 0; r < live.size(); ++r)
      if (live[r].active) active.push_back(r);
    if (active.empty()) break;

    // Compaction (rl/compaction.hpp): contexts over the budget become compact records.
    std::vector<PendingTurn> pending;
    for (size_t r : active)
      pending.push_back({&tasks[live[r].group]->spec(), &groups[live[r].group].rollouts[live[r].index],
                         &live[r].context, &live[r].segment, false});
    compact_context(policy_, pending, turn, options_, seed, st);

    // Generation: every active rollout's next turn in one batched call.
    std::vector<Prompt> prompts;
    for (size_t r : active) prompts.push_back(live[r].context);
    SampleOptions so = options_.sampling;
    so.seed = util::mix_seed(util::mix_seed(seed, static_cast<uint64_t>(turn)), 0x1u);
    auto t0 = Clock::now();
    auto samples = policy_.generate(prompts, so);
    st.generation_seconds += seconds_since(t0);

    // Grading: one call for the batch.
    std::vector<GradeRequest> requests;
    for (size_t a = 0; a < active.size(); ++a) requests.push_back({tasks[live[active[a]].group], samples[a].text});
    t0 = Clock::now();
    auto results = grader_.grade(requests);
    const double env_s = seconds_since(t0);
    st.env_seconds += env_s;
    st.env_calls += static_cast<int64_t>(requests.size());

    // Record each turn; the next turn continues its context, reasoning dropped, feedback appended.
    for (size_t a = 0; a < active.size(); ++a) {
      Live& l = live[active[a]];
      auto& ro = groups[l.group].rollouts[l.index];
      TurnResult tr;
      tr.turn = turn;
      tr.segment = l.segment;
      tr.compacted = pending[a].compacted;
      tr.prompt = prompts[a];
      tr.prompt_text = policy_.render(prompts[a]);
      tr.sample = std::move(samples[a]);
      tr.result = std::move(results[a]);
      tr.env_seconds = env_s / static_cast<double>(active.size());
      l.context = next_turn_context(prompts[a], tr.sample.text, env::to_string(tr.result.verdict),
                                    tr.result.feedback, tr.result.speedup);
      const bool correct = tr.result.is_correct();
      const bool infra = tr.result.is_infra_error();  // the environment failed: the rollout stops, void
      ro.turns.push_back(std::move(tr));
      if (turn == T || infra || (correct && !options_.refine_after_success)) l.active = false;
    }

    // DCP after turn 1: which groups go on to debugging turns.
    if (turn == 1) apply_dcp(groups, live, group_size, T, options_.dcp, st);
  }
  for (auto& g : groups)
    for (const auto& ro : g.rollouts)
      if (!ro.turns.empty() && !ro.turns.front().result.is_correct() && ro.first_success() > 1) g.recovered += 1;
  return groups;
}

}  // namespace leap::rl
