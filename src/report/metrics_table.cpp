#include "report/metrics_table.hpp"

namespace leap::report {

namespace {

std::string p_name(double p) {
  std::string s = fmt_num(p, 1);
  if (s.size() > 2 && s.substr(s.size() - 2) == ".0") s.resize(s.size() - 2);
  return "fast_" + s;
}

std::vector<std::string> row(const std::string& level, const metrics::Metrics& m, int64_t T) {
  std::vector<std::string> r = {level, std::to_string(m.tasks), std::to_string(m.attempts), fmt_num(m.compile_rate)};
  for (int64_t t = 0; t < T; ++t) r.push_back(t < static_cast<int64_t>(m.acc.size()) ? fmt_num(m.acc[static_cast<size_t>(t)]) : "-");
  for (const auto& [k, v] : m.pass_at_k) r.push_back(fmt_num(v));
  for (const auto& [p, v] : m.fast_p) r.push_back(fmt_num(v));
  r.push_back(fmt_num(m.geomean_speedup));
  r.push_back(fmt_num(m.turns_per_pass, 2));
  r.push_back(fmt_num(m.tokens_per_success, 1));
  std::string h;
  for (const auto& [k, n] : m.hacks)
    if (n) h += (h.empty() ? "" : " ") + k + "=" + std::to_string(n);
  r.push_back(h.empty() ? "0" : h);
  r.push_back(std::to_string(m.infra_errors));
  return r;
}

nlohmann::json num(double v) { return std::isnan(v) ? nlohmann::json(nullptr) : nlohmann::json(v); }

nlohmann::json slice_json(const metrics::Metrics& m) {
  nlohmann::json acc = nlohmann::json::array(), pass = nlohmann::json::object(), fast = nlohmann::json::object();
  for (double a : m.acc) acc.push_back(num(a));
  for (const auto& [k, v] : m.pass_at_k) pass["pass@" + std::to_string(k)] = num(v);
  for (const auto& [p, v] : m.fast_p) fast[p_name(p)] = num(v);
  return {{"tasks", m.tasks},          {"trajectories", m.trajectories},
          {"attempts", m.attempts},    {"compile_rate", num(m.compile_rate)},
          {"acc", acc},                {"pass_at_k", pass},
          {"fast_p", fast},            {"geomean_speedup", num(m.geomean_speedup)},
          {"turns_per_pass", num(m.turns_per_pass)}, {"tokens_per_success", num(m.tokens_per_success)},
          {"hacks", m.hacks},          {"infra_errors", m.infra_errors}};
}

}  // namespace

Table metrics_table(const metrics::MetricsReport& m) {
  Table t;
  t.header = {"level", "tasks", "attempts", "compile_rate"};
  for (int64_t k = 1; k <= m.turns; ++k) t.header.push_back("acc@" + std::to_string(k));
  for (const auto& [k, v] : m.overall.pass_at_k) t.header.push_back("pass@" + std::to_string(k));
  for (const auto& [p, v] : m.overall.fast_p) t.header.push_back(p_name(p));
  for (const char* h : {"geomean_speedup", "turns/pass", "tokens/success", "hacks", "infra_errors"}) t.header.push_back(h);
  if (m.by_level.size() > 1 || (m.by_level.size() == 1 && m.by_level.begin()->first != "-"))
    for (const auto& [l, s] : m.by_level) {
      auto r = row(l, s, m.turns);
      r.resize(t.header.size(), "-");
      t.rows.push_back(r);
    }
  t.rows.push_back(row("all", m.overall, m.turns));
  return t;
}

nlohmann::json metrics_json(const metrics::MetricsReport& m) {
  nlohmann::json levels = nlohmann::json::object();
  for (const auto& [l, s] : m.by_level) levels[l] = slice_json(s);
  return {{"turns", m.turns}, {"samples", m.samples}, {"overall", slice_json(m.overall)}, {"levels", levels}};
}

}  // namespace leap::report
