#include "store/records_json.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace leap::store {

namespace {

using nlohmann::json;

json num(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double to_num(const json& j) {
  if (j.is_string()) {
    const auto s = j.get<std::string>();
    if (s == "nan") return std::nan("");
    if (s == "inf") return INFINITY;
    if (s == "-inf") return -INFINITY;
    throw StoreError("step rows: bad number '" + s + "'");
  }
  return j.get<double>();
}

json opt(const std::optional<double>& v) { return v ? num(*v) : json(nullptr); }
json opt(const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); }
json opt(const std::optional<std::string>& v) { return v ? json(*v) : json(nullptr); }

void get(const json& j, const char* k, std::optional<double>& v) {
  if (j.at(k).is_null()) v.reset();
  else v = to_num(j.at(k));
}
void get(const json& j, const char* k, std::optional<int64_t>& v) {
  if (j.at(k).is_null()) v.reset();
  else v = j.at(k).get<int64_t>();
}
void get(const json& j, const char* k, std::optional<std::string>& v) {
  if (j.at(k).is_null()) v.reset();
  else v = j.at(k).get<std::string>();
}

json turn_json(const TurnRecord& t) {
  return {{"turn_index", t.turn_index}, {"node_index", t.node_index}, {"parent_index", opt(t.parent_index)},
          {"segment_index", t.segment_index}, {"prompt", t.prompt},
          {"completion", t.completion}, {"prompt_tokens", t.prompt_tokens}, {"completion_tokens", t.completion_tokens},
          {"verdict", t.verdict}, {"feedback", t.feedback}, {"candidate_ms", opt(t.candidate_ms)},
          {"reference_ms", opt(t.reference_ms)}, {"speedup", opt(t.speedup)}, {"suspicious", t.suspicious},
          {"reward", num(t.reward)}, {"discounted_return", num(t.discounted_return)}, {"advantage", num(t.advantage)},
          {"old_logprob_mean", opt(t.old_logprob_mean)}, {"new_logprob_mean", opt(t.new_logprob_mean)},
          {"env_seconds", num(t.env_seconds)}, {"compacted", t.compacted}, {"kb_snippets", t.kb_snippets}};
}

TurnRecord turn_from(const json& j) {
  TurnRecord t;
  t.turn_index = j.at("turn_index").get<int64_t>();
  t.node_index = j.at("node_index").get<int64_t>();
  t.kb_snippets = j.at("kb_snippets").get<std::string>();
  get(j, "parent_index", t.parent_index);
  t.segment_index = j.at("segment_index").get<int64_t>();
  t.prompt = j.at("prompt").get<std::string>();
  t.completion = j.at("completion").get<std::string>();
  t.prompt_tokens = j.at("prompt_tokens").get<int64_t>();
  t.completion_tokens = j.at("completion_tokens").get<int64_t>();
  t.verdict = j.at("verdict").get<std::string>();
  t.feedback = j.at("feedback").get<std::string>();
  get(j, "candidate_ms", t.candidate_ms);
  get(j, "reference_ms", t.reference_ms);
  get(j, "speedup", t.speedup);
  t.suspicious = j.at("suspicious").get<bool>();
  t.reward = to_num(j.at("reward"));
  t.discounted_return = to_num(j.at("discounted_return"));
  t.advantage = to_num(j.at("advantage"));
  get(j, "old_logprob_mean", t.old_logprob_mean);
  get(j, "new_logprob_mean", t.new_logprob_mean);
  t.env_seconds = to_num(j.at("env_seconds"));
  t.compacted = j.at("compacted").get<bool>();
  return t;
}

json rollout_json(const RolloutRecord& r) {
  json turns = json::array();
  for (const auto& t : r.turns) turns.push_back(turn_json(t));
  return {{"rollout_index", r.rollout_index}, {"final_verdict", r.final_verdict},
          {"first_success_turn", opt(r.first_success_turn)}, {"reward", num(r.reward)},
          {"advantage", opt(r.advantage)}, {"reward_rank", opt(r.reward_rank)},
          {"reward_binary", opt(r.reward_binary)}, {"reward_speedup", opt(r.reward_speedup)},
          {"reward_kernelgym", opt(r.reward_kernelgym)}, {"turns", turns}};
}

RolloutRecord rollout_from(const json& j) {
  RolloutRecord r;
  r.rollout_index = j.at("rollout_index").get<int64_t>();
  r.final_verdict = j.at("final_verdict").get<std::string>();
  get(j, "first_success_turn", r.first_success_turn);
  r.reward = to_num(j.at("reward"));
  get(j, "advantage", r.advantage);
  get(j, "reward_rank", r.reward_rank);
  get(j, "reward_binary", r.reward_binary);
  get(j, "reward_speedup", r.reward_speedup);
  get(j, "reward_kernelgym", r.reward_kernelgym);
  for (const auto& t : j.at("turns")) r.turns.push_back(turn_from(t));
  return r;
}

}  // namespace

std::string step_rows_to_json(const std::vector<GroupRecord>& groups, const std::vector<EventRecord>& events) {
  json gs = json::array();
  for (const auto& g : groups) {
    json rs = json::array();
    for (const auto& r : g.rollouts) rs.push_back(rollout_json(r));
    gs.push_back({{"task", {{"task_set", g.task.task_set}, {"name", g.task.name}, {"level", opt(g.task.level)},
                            {"category", opt(g.task.category)}, {"hash", g.task.hash}}},
                  {"group_index", g.group_index}, {"dcp_activated", g.dcp_activated},
                  {"fail_ratio_turn1", num(g.fail_ratio_turn1)}, {"recovered", g.recovered}, {"rollouts", rs}});
  }
  json es = json::array();
  for (const auto& e : events) es.push_back({{"kind", e.kind}, {"message", e.message}, {"time", opt(e.time)}});
  // Invalid UTF-8 in model text is replaced rather than failing the step.
  return json{{"groups", gs}, {"events", es}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

void step_rows_from_json(const std::string& text, std::vector<GroupRecord>& groups, std::vector<EventRecord>& events) {
  try {
    const json j = json::parse(text);
    for (const auto& g : j.at("groups")) {
      GroupRecord r;
      const auto& t = g.at("task");
      r.task.task_set = t.at("task_set").get<std::string>();
      r.task.name = t.at("name").get<std::string>();
      get(t, "level", r.task.level);
      get(t, "category", r.task.category);
      r.task.hash = t.at("hash").get<std::string>();
      r.group_index = g.at("group_index").get<int64_t>();
      r.dcp_activated = g.at("dcp_activated").get<bool>();
      r.fail_ratio_turn1 = to_num(g.at("fail_ratio_turn1"));
      r.recovered = g.at("recovered").get<int64_t>();
      for (const auto& ro : g.at("rollouts")) r.rollouts.push_back(rollout_from(ro));
      groups.push_back(std::move(r));
    }
    for (const auto& e : j.at("events")) {
      EventRecord ev;
      ev.kind = e.at("kind").get<std::string>();
      ev.message = e.at("message").get<std::string>();
      get(e, "time", ev.time);
      events.push_back(std::move(ev));
    }
  } catch (const nlohmann::json::exception& e) {
    throw StoreError(std::string("step rows: malformed JSON from a rank: ") + e.what());
  }
}

}  // namespace leap::store
