// `leap report` and `leap export` over a store filled through the Store API: two runs that differ
// in dcp.enabled (plus a second seed of one of them), with steps, turns, metrics and an evaluation.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "report/config_diff.hpp"
#include "report/plots.hpp"
#include "report/table.hpp"
#include "store/store.hpp"
#include "support.hpp"

namespace fs = std::filesystem;
using namespace leap::store;
using leap::test::run_leap;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// Checks that every element opened in `xml` is closed in order (HTML void elements, comments,
/// declarations and self-closing tags aside). Returns "" or what is wrong.
std::string unbalanced_tags(const std::string& xml) {
  static const std::vector<std::string> voids = {"meta", "link", "br", "hr", "img", "input"};
  std::vector<std::string> stack;
  for (size_t i = xml.find('<'); i != std::string::npos; i = xml.find('<', i + 1)) {
    if (xml.compare(i, 4, "<!--") == 0) {
      i = xml.find("-->", i);
      if (i == std::string::npos) return "unterminated comment";
      continue;
    }
    size_t end = xml.find('>', i);
    if (end == std::string::npos) return "unterminated tag at " + std::to_string(i);
    std::string tag = xml.substr(i + 1, end - i - 1);
    if (tag.empty() || tag[0] == '!' || tag[0] == '?') continue;
    bool closing = tag[0] == '/', self = tag.back() == '/';
    std::string name = tag.substr(closing ? 1 : 0);
    name = name.substr(0, name.find_first_of(" \t\r\n/"));
    if (closing) {
      if (stack.empty() || stack.back() != name)
        return "</" + name + "> closes " + (stack.empty() ? std::string("nothing") : "<" + stack.back() + ">");
      stack.pop_back();
    } else if (!self && std::find(voids.begin(), voids.end(), name) == voids.end()) {
      stack.push_back(name);
    }
    i = end;
  }
  return stack.empty() ? "" : "<" + stack.back() + "> is never closed";
}

TurnRecord turn(int64_t t, const std::string& verdict, std::optional<double> speedup, int64_t tokens) {
  TurnRecord r;
  r.turn_index = t;
  r.node_index = t - 1;
  if (t > 1) r.parent_index = t - 2;
  r.prompt = "prompt " + std::to_string(t);
  r.completion = "completion " + std::to_string(t);
  r.completion_tokens = tokens;
  r.verdict = verdict;
  r.feedback = verdict == "correct" ? "" : "try again";
  r.speedup = speedup;
  r.reward = verdict == "correct" ? 1.0 : 0.0;
  r.discounted_return = r.reward;
  r.advantage = verdict == "correct" ? 0.5 : -0.5;
  return r;
}

/// A run of 2 steps; each step has one group of two rollouts on task "relu". `dcp`: whether the
/// step-1 group was expanded. Rollout 0 is correct at turn 1 (2.0x, 100 tokens), rollout 1 fails
/// turn 1 (50 tokens) and, when expanded, is correct at turn 2 (1.0x, 50 tokens).
std::string make_run(Store& st, const std::string& id, bool dcp, int seed, double t0, const std::string& extra_yaml = "") {
  RunInfo info;
  info.id = id;
  info.name = dcp ? "dcp_on" : "dcp_off";
  info.config_yaml = std::string("name: ") + info.name + "\ndcp:\n  enabled: " + (dcp ? "true" : "false") +
                     "\n  min_fail_ratio: 0.5\nreward:\n  kind: binary\ntrain:\n  seed: " + std::to_string(seed) + "\n" +
                     extra_yaml;
  info.seed = seed;
  info.started_at = t0;
  st.create_run(info);
  for (int64_t step = 1; step <= 2; ++step) {
    StepRecord s;
    s.run_id = id;
    s.step = step;
    s.started_at = t0 + 10.0 * (step - 1);
    s.ended_at = t0 + 10.0 * step;
    s.generation_seconds = 6;
    s.env_seconds = 3;
    s.update_seconds = 1;
    GroupRecord g;
    g.task = {"starter", "relu", 1, std::string("elementwise"), "h1"};
    g.dcp_activated = dcp && step == 1;
    g.fail_ratio_turn1 = 0.5;
    RolloutRecord a, b;
    a.rollout_index = 0;
    a.final_verdict = "correct";
    a.first_success_turn = 1;
    a.reward = 1;
    a.turns = {turn(1, "correct", 2.0, 100)};
    b.rollout_index = 1;
    b.turns = {turn(1, "wrong_output", std::nullopt, 50)};
    if (g.dcp_activated) {
      b.turns.push_back(turn(2, "correct", 1.0, 50));
      b.first_success_turn = 2;
      g.recovered = 1;
    }
    b.final_verdict = b.turns.back().verdict;
    g.rollouts = {a, b};
    s.groups = {g};
    s.metrics = {{"reward_mean", 0.25 * static_cast<double>(step), s.ended_at},
                 {"activated_groups_frac", g.dcp_activated ? 1.0 : 0.0, s.ended_at},
                 {"eval/acc@1", dcp ? 0.4 + 0.2 * static_cast<double>(step) : 0.5, s.ended_at},
                 {"eval/acc@2", dcp ? 0.9 : 0.5, s.ended_at},
                 {"eval/fast_1", 0.25, s.ended_at}};
    st.write_step(s);
  }
  st.finish_run(id, RunStatus::finished, t0 + 25);
  return id;
}

}  // namespace

TEST_CASE("report: config diff finds the differing leaf keys, ignoring name and seeds") {
  auto a = leap::report::flatten_yaml("name: a\ndcp: {enabled: true, max: 0.8}\nlevels: [1, 2]\ntrain: {seed: 1}\n", "a");
  auto b = leap::report::flatten_yaml("name: b\ndcp: {enabled: false, max: 0.8}\nlevels: [1, 2]\ntrain: {seed: 2}\n", "b");
  CHECK(a.at("dcp.enabled") == "true");
  CHECK(a.at("levels") == "[1, 2]");
  CHECK(leap::report::differing_keys({a, b}) == std::vector<std::string>{"dcp.enabled"});
}

TEST_CASE("report: ablation table, curves, SVG plots and HTML over two runs (DCP on / off)") {
  leap::test::TempDir tmp;
  const std::string db = (tmp.path / "leap.db").string();
  {
    Store st(db);
    make_run(st, "20260101-000000-aaaa", true, 1, 1000);
    make_run(st, "20260101-000000-bbbb", false, 1, 2000);
  }
  auto r = run_leap("--db " + db + " report --target 0.7");
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "20260101-000000-aaaa"));
  CHECK(contains(r.out, "20260101-000000-bbbb"));
  CHECK(contains(r.out, "dcp.enabled"));
  CHECK_FALSE(contains(r.out, "train.seed"));
  CHECK_FALSE(contains(r.out, "min_fail_ratio"));  // equal in both runs
  // Run aaaa: 1 of its 2 groups activated = 50.0 %; 5 turns; tokens 100+50+50 + 100+50 = 350 over
  // 3 successes = 116.7; final eval acc@1 0.8 reached 0.7 first... never before step 2 (0.6 at
  // step 1), so at t0 + 20 s. Run bbbb: 0 %, 4 turns, 300 tokens / 2 successes = 150.0.
  CHECK(contains(r.out, "50.0"));
  CHECK(contains(r.out, "116.7"));
  CHECK(contains(r.out, "150.0"));
  CHECK(contains(r.out, "20.0"));
  CHECK(contains(r.out, "per-step curves"));

  auto csv = run_leap("--db " + db + " report --format csv");
  REQUIRE(csv.rc == 0);
  std::istringstream lines(csv.out);
  std::string header, row1, row2;
  std::getline(lines, header);
  std::getline(lines, row1);
  std::getline(lines, row2);
  CHECK(header.rfind("arm,runs,dcp.enabled,steps,eval_acc@1_start,eval_acc@1,eval_acc@2,turns/pass,fast_1", 0) == 0);
  // eval_acc@1_start: the first eval/acc@1 point (0.6 at step 1 for aaaa); no eval_results rows,
  // so no turns per pass ("-").
  CHECK(row1.rfind("dcp_on (20260101-000000-aaaa),1,true,2,0.600,0.800,0.900,-,0.250", 0) == 0);
  CHECK(row2.rfind("dcp_off (20260101-000000-bbbb),1,false,2,0.500,0.500,0.500,-,0.250", 0) == 0);

  const fs::path out = tmp.path / "report";
  auto h = run_leap("--db " + db + " report --format html --out " + out.string());
  CAPTURE(h.err);
  REQUIRE(h.rc == 0);
  std::string html = leap::test::read_file((out / "report.html").string());
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(unbalanced_tags(html) == "");
  CHECK(contains(html, "dcp.enabled"));
  if (!leap::report::gnuplot_available()) {
    MESSAGE("gnuplot is not installed: SVG checks skipped");
    return;
  }
  for (const char* f : {"acc1_vs_step.svg", "accT_vs_step.svg", "acc1_vs_env_calls.svg", "accT_vs_env_calls.svg",
                        "acc1_vs_time.svg", "accT_vs_time.svg", "reward_vs_step.svg", "first_success_turn_vs_step.svg",
                        "turns_per_pass_vs_step.svg", "env_calls_vs_step.svg", "dcp_activation.svg"}) {
    CAPTURE(f);
    std::string svg = leap::test::read_file((out / "plots" / f).string());
    REQUIRE(!svg.empty());
    CHECK(contains(svg, "<svg"));
    CHECK(contains(svg, "</svg>"));
    CHECK(unbalanced_tags(svg) == "");
    CHECK(contains(svg, "20260101-000000-aaaa"));  // one line per run, titled with the run
    CHECK(contains(svg, "20260101-000000-bbbb"));
  }
  CHECK(contains(html, "<svg"));  // plots are inlined
}

TEST_CASE("report: a plot without data removes an earlier report's file, numbers that round to 0 print unsigned") {
  leap::test::TempDir tmp;
  const std::string stale = tmp.write("reward_vs_step.svg", "<svg>old</svg>");
  leap::report::PlotSpec p;
  p.file = "reward_vs_step.svg";
  p.lines.push_back({});  // a series without points
  CHECK(leap::report::write_plots(tmp.path.string(), {p}).empty());
  CHECK_FALSE(fs::exists(stale));
  CHECK(leap::report::fmt_num(-0.00001, 4) == "0.0000");
  CHECK(leap::report::fmt_num(-0.00007, 4) == "-0.0001");
  CHECK(leap::report::fmt_num(-1.5, 1) == "-1.5");
  CHECK(leap::report::fmt_num(0.0, 2) == "0.00");
}

TEST_CASE("report: runs that differ only in seed form one arm with mean and spread") {
  leap::test::TempDir tmp;
  const std::string db = (tmp.path / "leap.db").string();
  Store st(db);  // stays open, as a live run's writer would
  make_run(st, "20260101-000000-aaaa", true, 1, 1000);
  make_run(st, "20260101-000000-cccc", true, 2, 3000);
  make_run(st, "20260101-000000-bbbb", false, 1, 2000);
  auto r = run_leap("--db " + db + " report --format md --runs 20260101-000000-aaaa,20260101-000000-cccc,20260101-000000-bbbb");
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "| dcp_on (2 seeds) | 2 | true |"));
  CHECK(contains(r.out, "0.800 ± 0.000"));  // both seeds end at eval acc@1 0.8
  CHECK(contains(r.out, "| dcp_off (20260101-000000-bbbb) | 1 | false |"));
  CHECK(run_leap("--db " + db + " report --runs nosuchrun").rc == 2);
  // A repeated id (and spaces around ids) is one run, not a second seed.
  auto dup = run_leap("--db " + db + " report --format md --runs '20260101-000000-bbbb, 20260101-000000-bbbb'");
  REQUIRE(dup.rc == 0);
  CHECK(contains(dup.out, "| dcp_off (20260101-000000-bbbb) | 1 |"));
  // The time-to-target column keeps the target's digits.
  CHECK(contains(run_leap("--db " + db + " report --format csv --target 0.655").out, "s_to_acc@1>=0.655"));
  // --same: a key whose values do not make arms (here dcp.enabled) pools the three runs.
  auto same = run_leap("--db " + db + " report --format md --same dcp.enabled --runs "
                       "20260101-000000-aaaa,20260101-000000-cccc,20260101-000000-bbbb");
  CAPTURE(same.err);
  REQUIRE(same.rc == 0);
  CHECK(contains(same.out, "| dcp_on (3 runs, 2 seeds) | 3 |"));  // seeds 1, 2 and 1: two distinct
  CHECK_FALSE(contains(same.out, "dcp_off"));
  // --out that is a file, or whose report file is a folder: exit 2 naming it, nothing written.
  const std::string file = tmp.write("a_file", "x");
  auto as_file = run_leap("--db " + db + " report --format md --out " + file);
  CHECK(as_file.rc == 2);
  CHECK(contains(as_file.err, "--out " + file + ": a file, not a folder"));
  fs::create_directories(tmp.path / "out" / "report.html");
  auto blocked = run_leap("--db " + db + " report --format html --out " + (tmp.path / "out").string());
  CHECK(blocked.rc == 2);
  CHECK(contains(blocked.err, "is a folder"));
  CHECK_FALSE(fs::exists(tmp.path / "out" / "plots"));
  auto nokey = run_leap("--db " + db + " report --same no.such.key");
  CHECK(nokey.rc == 2);
  CHECK(contains(nokey.err, "no run has the config key 'no.such.key'"));
}

TEST_CASE("report: a key a run's stored config lacks reads as this binary's default (an older run is no arm of its own)") {
  leap::test::TempDir tmp;
  const std::string db = (tmp.path / "leap.db").string();
  {
    Store st(db);
    make_run(st, "20260101-000000-aaaa", true, 1, 1000);                                      // older: no turns.branch
    make_run(st, "20260101-000000-cccc", true, 2, 3000, "turns:\n  branch: 1\n");            // the default, written out
    make_run(st, "20260101-000000-dddd", true, 3, 4000, "turns:\n  branch: 2\n");            // a real switch
  }
  auto r = run_leap("--db " + db + " report --format md");
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CAPTURE(r.out);
  // One name, two arms: each label names the switch (turns.branch).
  CHECK(contains(r.out, "| dcp_on [turns.branch=1] (2 seeds) | 2 | 1 |"));
  CHECK(contains(r.out, "| dcp_on [turns.branch=2] (20260101-000000-dddd) | 1 | 2 |"));
  CHECK_FALSE(contains(r.out, "(unset)"));
}

TEST_CASE("export: one JSON line per turn with prompt, completion, verdict, rewards and advantage") {
  leap::test::TempDir tmp;
  const std::string db = (tmp.path / "leap.db").string();
  {
    Store st(db);
    make_run(st, "20260101-000000-aaaa", true, 1, 1000);
  }
  const std::string file = (tmp.path / "turns.jsonl").string();
  auto r = run_leap("--db " + db + " export --run 20260101-000000-aaaa --format jsonl --out " + file);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  std::istringstream in(leap::test::read_file(file));
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 5);  // step 1: 1 + 2 turns, step 2: 1 + 1
  CHECK(rows[0]["run"] == "20260101-000000-aaaa");
  CHECK(rows[0]["step"] == 1);
  CHECK(rows[0]["task"] == "relu");
  CHECK(rows[0]["rollout"] == 0);
  CHECK(rows[0]["turn"] == 1);
  CHECK(rows[0]["verdict"] == "correct");
  CHECK(rows[0]["prompt"] == "prompt 1");
  CHECK(rows[0]["completion"] == "completion 1");
  CHECK(rows[0]["rewards"]["turn"] == 1.0);
  CHECK(rows[0]["advantage"] == 0.5);
  CHECK(rows[0]["speedup"] == 2.0);
  CHECK(rows[2]["rollout"] == 1);
  CHECK(rows[2]["turn"] == 2);
  CHECK(rows[1]["feedback"] == "try again");
  CHECK(rows[1]["speedup"].is_null());
  auto s = run_leap("--db " + db + " export --run 20260101-000000-aaaa");
  CHECK(s.rc == 0);
  CHECK(std::count(s.out.begin(), s.out.end(), '\n') == 5);
}
