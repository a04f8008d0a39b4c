#include "rl/rollout.hpp"

#include <chrono>

#include "env/task_runtime.hpp"
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

int64_t RolloutResult::completion_tokens() const {
  int64_t n = 0;
  for (const auto& t : turns) n += static_cast<int64_t>(t.sample.completion_ids.size());
  for (const auto& t : summaries) n += static_cast<int64_t>(t.sample.completion_ids.size());
  return n;
}

RolloutEngine::RolloutEngine(Policy& policy, Grader& grader, EngineOptions options)
    : policy_(policy), grader_(grader), options_(std::move(options)) {}

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

    // Compaction: a turn's prompt over the budget replaces earlier turns by a compact record.
    std::vector<Prompt> prompts;
    std::vector<bool> compacted(active.size(), false);
    std::vector<size_t> need_summary;  // positions in `active`
    for (size_t a = 0; a < active.size(); ++a) {
      prompts.push_back(live[active[a]].context);
      if (turn > 1 && options_.compaction && policy_.count_tokens(prompts.back()) > options_.max_prompt_tokens)
        need_summary.push_back(a);
    }
    std::vector<std::string> summaries(active.size());
    if (!need_summary.empty() && options_.compaction_strategy == "summary") {
      std::vector<Prompt> sp;
      for (size_t a : need_summary) {
        Prompt p = prompts[a];
        p.push_back({"user", summary_request()});
        sp.push_back(std::move(p));
      }
      SampleOptions so = options_.sampling;
      so.max_new_tokens = options_.summary_max_tokens;
      so.seed = util::mix_seed(util::mix_seed(seed, static_cast<uint64_t>(turn)), 0x5u);
      const auto t0 = Clock::now();
      auto samples = policy_.generate(sp, so);
      st.generation_seconds += seconds_since(t0);
      for (size_t s = 0; s < need_summary.size(); ++s) {
        const size_t a = need_summary[s];
        Live& l = live[active[a]];
        TurnResult tr;
        tr.turn = turn;
        tr.segment = l.segment;
        tr.is_summary = true;
        tr.prompt = sp[s];
        tr.prompt_text = policy_.render(sp[s]);
        tr.sample = std::move(samples[s]);
        summaries[a] = strip_think(tr.sample.text);
        groups[l.group].rollouts[l.index].summaries.push_back(std::move(tr));
      }
    }
    for (size_t a : need_summary) {
      Live& l = live[active[a]];
      auto& ro = groups[l.group].rollouts[l.index];
      const auto& spec = tasks[l.group]->spec();
      const int64_t before = policy_.count_tokens(prompts[a]);
      std::string body = task_message(spec, options_.backend);
      if (options_.compaction_strategy == "summary") {
        body += "\nSummary of your earlier attempts:\n" + summaries[a] + "\n";
      } else {
        body += "\nYour earlier attempts:\n";
        for (const auto& t : ro.turns)
          body += digest_line(t.turn, env::to_string(t.result.verdict), t.result.feedback) + "\n";
        const auto& last = ro.turns.back();
        body += "\nYour latest attempt (attempt " + std::to_string(last.turn) + "):\n" + strip_think(last.sample.text) + "\n";
      }
      const auto& last = ro.turns.back();
      body += "\n" + feedback_message(env::to_string(last.result.verdict), last.result.feedback, last.result.speedup);
      Prompt compact = {{"system", system_prompt(options_.backend)}, {"user", body}};
      const int64_t after = policy_.count_tokens(compact);
      prompts[a] = compact;
      l.context = compact;
      l.segment += 1;
      compacted[a] = true;
      ro.compactions += 1;
      ro.tokens_saved += std::max<int64_t>(0, before - after);
      st.compaction_events += 1;
      st.tokens_saved += std::max<int64_t>(0, before - after);
    }

    SampleOptions so = options_.sampling;
    so.seed = util::mix_seed(util::mix_seed(seed, static_cast<uint64_t>(turn)), 0x1u);
    auto t0 = Clock::now();
    auto samples = policy_.generate(prompts, so);
    st.generation_seconds += seconds_since(t0);

    std::vector<GradeRequest> requests;
    for (size_t a = 0; a < active.size(); ++a) requests.push_back({tasks[live[active[a]].group], samples[a].text});
    t0 = Clock::now();
    auto results = grader_.grade(requests);
    const double env_s = seconds_since(t0);
    st.env_seconds += env_s;
    st.env_calls += static_cast<int64_t>(requests.size());

    for (size_t a = 0; a < active.size(); ++a) {
      Live& l = live[active[a]];
      auto& ro = groups[l.group].rollouts[l.index];
      TurnResult tr;
      tr.turn = turn;
      tr.segment = l.segment;
      tr.compacted = compacted[a];
      tr.prompt = prompts[a];
      tr.prompt_text = policy_.render(prompts[a]);
      tr.sample = std::move(samples[a]);
      tr.result = std::move(results[a]);
      tr.env_seconds = env_s / static_cast<double>(active.size());
      // The next turn continues this context: reasoning dropped, the feedback appended.
      l.context = prompts[a];
      l.context.push_back({"assistant", strip_think(tr.sample.text)});
      l.context.push_back({"user", feedback_message(env::to_string(tr.result.verdict), tr.result.feedback,
                                                    tr.result.speedup)});
      const bool correct = tr.result.is_correct();
      ro.turns.push_back(std::move(tr));
      if (turn == T || (correct && !options_.refine_after_success)) l.active = false;
    }

    if (turn == 1) {
      // DCP (LEAP): expand a group to turns 2..T only when its turn-1 failure ratio is in range.
      for (auto& g : groups) {
        int failed = 0;
        for (const auto& ro : g.rollouts)
          if (!ro.turns.empty() && !ro.turns.front().result.is_correct()) ++failed;
        g.failed_turn1 = failed;
        g.dcp = dcp_decide(failed, group_size, options_.dcp);
        if (!g.dcp.expand && T > 1) {
          g.env_calls_saved = failed * (T - 1);
          st.env_calls_saved += g.env_calls_saved;
        }
      }
      for (auto& l : live)
        if (l.active && !groups[l.group].dcp.expand) l.active = false;
    }
  }
  for (auto& g : groups)
    for (const auto& ro : g.rollouts)
      if (!ro.turns.empty() && !ro.turns.front().result.is_correct() && ro.first_success() > 1) g.recovered += 1;
  return groups;
}

}  // namespace leap::rl
