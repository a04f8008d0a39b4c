// `leap report` per-arm means and standard errors over seeds, on a synthetic store: two arms of
// three seeds each whose evaluations, groups and turns are written through the Store API; the
// expected means and standard errors are computed here from the per-run numbers the store was
// filled with, by a formula of their own (sum of squares), not by the report's code.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "report/ablation.hpp"
#include "report/runs.hpp"
#include "report_fixture.hpp"
#include "store/lease.hpp"
#include "store/store.hpp"
#include "support.hpp"

using namespace leap::store;
using leap::test::run_leap;

namespace {

/// What one synthetic run holds.
struct RunSpec {
  std::string id, arm;
  bool dcp = true;
  int seed = 0;
  int start_correct = 0;  ///< of 4 eval tasks at step 0, correct at turn 1
  int final_t1 = 0;       ///< of 4 eval tasks at the final eval, correct at turn 1
  int final_t2 = 0;       ///< ... correct only at turn 2
  int activated = 0;      ///< of the 4 training groups (2 steps x 2 groups)
  double final_at = 0;    ///< seconds after the start when the final eval is stored
  int turns_max = 0;      ///< written into the config as turns.max when > 0
};

TurnRecord turn(int64_t t, const std::string& verdict) {
  TurnRecord r;
  r.turn_index = t;
  r.node_index = t - 1;
  if (t > 1) r.parent_index = t - 2;
  r.prompt = "p";
  r.completion = "c";
  r.completion_tokens = 10;
  r.verdict = verdict;
  r.reward = verdict == "correct";
  return r;
}

std::vector<EvalResultRecord> eval_rows(int t1, int t2) {
  std::vector<EvalResultRecord> rows;
  for (int k = 0; k < 4; ++k) {
    TaskInfo task{"gen", "task" + std::to_string(k), 1, std::string("elementwise"), "h" + std::to_string(k)};
    EvalResultRecord a;
    a.task = task;
    a.turn = 1;
    a.verdict = k < t1 ? "correct" : "wrong_output";
    rows.push_back(a);
    if (k >= t1) {
      EvalResultRecord b = a;
      b.turn = 2;
      b.verdict = k < t1 + t2 ? "correct" : "wrong_output";
      rows.push_back(b);
    }
  }
  return rows;
}

void write_run(Store& st, const RunSpec& s, double t0) {
  RunInfo info;
  info.id = s.id;
  info.name = s.arm;
  info.config_yaml = "name: " + s.arm + "\ndcp:\n  enabled: " + (s.dcp ? "true" : "false") + "\ntrain:\n  seed: " +
                     std::to_string(s.seed) + "\n" +
                     (s.turns_max > 0 ? "turns:\n  max: " + std::to_string(s.turns_max) + "\n" : std::string());
  info.seed = s.seed;
  info.started_at = t0;
  st.create_run(info);
  st.write_evaluation({s.id, 0, "gen", "{}", t0 + 1}, eval_rows(s.start_correct, 0),
                      {{"eval/acc@1", s.start_correct / 4.0, t0 + 1}});
  int activated_left = s.activated;
  for (int64_t step = 1; step <= 2; ++step) {
    StepRecord r;
    r.run_id = s.id;
    r.step = step;
    r.started_at = t0 + step;
    r.ended_at = t0 + step + 1;
    for (int gi = 0; gi < 2; ++gi) {
      GroupRecord g;
      g.group_index = gi;
      g.task = {"gen", "train" + std::to_string(gi), 1, std::string("elementwise"), "t" + std::to_string(gi)};
      g.dcp_activated = activated_left-- > 0;
      RolloutRecord a, b;
      a.rollout_index = 0;
      a.turns = {turn(1, "correct")};
      a.final_verdict = "correct";
      a.first_success_turn = 1;
      b.rollout_index = 1;
      b.turns = {turn(1, "wrong_output")};
      if (g.dcp_activated) b.turns.push_back(turn(2, "wrong_output"));
      b.final_verdict = "wrong_output";
      g.rollouts = {a, b};
      r.groups.push_back(g);
    }
    st.write_step(r);
  }
  const double acc1 = s.final_t1 / 4.0, acc2 = (s.final_t1 + s.final_t2) / 4.0;
  st.write_evaluation({s.id, 2, "gen", "{}", t0 + s.final_at}, eval_rows(s.final_t1, s.final_t2),
                      {{"eval/acc@1", acc1, t0 + s.final_at}, {"eval/acc@2", acc2, t0 + s.final_at}});
  st.finish_run(s.id, RunStatus::finished, t0 + s.final_at + 1);
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::stringstream in(line);
  while (std::getline(in, cell, ',')) out.push_back(cell);
  return out;
}

/// Mean and standard error by sum of squares: se = sqrt((sum x^2 - n mean^2) / (n (n - 1))).
std::pair<double, double> mean_se(const std::vector<double>& x) {
  double s = 0, s2 = 0;
  for (double v : x) s += v, s2 += v * v;
  const double n = static_cast<double>(x.size()), m = s / n;
  return {m, n > 1 ? std::sqrt(std::max(0.0, s2 - n * m * m) / (n * (n - 1))) : NAN};
}

/// Checks a "mean ± se" cell against the expected values, to the cell's printed precision.
void check_cell(const std::string& cell, const std::vector<double>& values, double tol) {
  CAPTURE(cell);
  auto [m, se] = mean_se(values);
  const std::string sep = " ± ";  // "±" is two bytes in UTF-8
  const size_t pm = cell.find(sep);
  REQUIRE(pm != std::string::npos);
  CHECK(std::fabs(std::stod(cell.substr(0, pm)) - m) <= tol);
  CHECK(std::fabs(std::stod(cell.substr(pm + sep.size())) - se) <= tol);
}

}  // namespace

TEST_CASE("report: per-arm means with standard errors over seeds (Acc@1, Acc@T, activated %, env calls/step, "
          "turns/pass, time to target)") {
  leap::test::TempDir tmp;
  const std::string db = (tmp.path / "leap.db").string();
  const std::vector<RunSpec> runs = {
      {"20260101-000000-a001", "arm_a", true, 1, 1, 2, 1, 2, 100},
      {"20260101-000000-b001", "arm_b", false, 1, 1, 1, 0, 0, 300},
      {"20260101-000000-a002", "arm_a", true, 2, 0, 3, 1, 3, 200},
      {"20260101-000000-b002", "arm_b", false, 2, 1, 2, 1, 0, 300},
      {"20260101-000000-a003", "arm_a", true, 3, 1, 1, 2, 1, 400},
      {"20260101-000000-b003", "arm_b", false, 3, 0, 2, 2, 0, 600},
  };
  {
    Store st(db);
    double t0 = 1000;
    for (const auto& r : runs) write_run(st, r, t0 += 10000);
  }
  auto res = run_leap("--db " + db + " report --format csv --target 0.5");
  CAPTURE(res.err);
  REQUIRE(res.rc == 0);
  std::stringstream lines(res.out);
  std::string header_line;
  std::getline(lines, header_line);
  const std::vector<std::string> header = split_csv(header_line);
  std::map<std::string, std::vector<std::string>> rows;
  for (std::string l; std::getline(lines, l);)
    if (!l.empty()) rows[split_csv(l)[0]] = split_csv(l);
  REQUIRE(rows.count("arm_a (3 seeds)"));
  REQUIRE(rows.count("arm_b (3 seeds)"));
  auto col = [&](const std::string& name) {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    FAIL("no column " << name);
    return size_t{0};
  };
  for (const std::string arm : {"arm_a", "arm_b"}) {
    CAPTURE(arm);
    const auto& row = rows.at(arm + " (3 seeds)");
    CHECK(row[col("runs")] == "3");
    std::vector<double> start, acc1, acc2, act, calls, tpp, ttt;
    for (const auto& r : runs) {
      if (r.arm != arm) continue;
      start.push_back(r.start_correct / 4.0);
      acc1.push_back(r.final_t1 / 4.0);
      acc2.push_back((r.final_t1 + r.final_t2) / 4.0);
      act.push_back(100.0 * r.activated / 4.0);
      calls.push_back((2 * 4 + r.activated) / 2.0);  // 4 groups of 2 rollouts, + 1 turn per activated group, over 2 steps
      tpp.push_back((1.0 * r.final_t1 + 2.0 * r.final_t2) / (r.final_t1 + r.final_t2));
      if (r.final_t1 / 4.0 >= 0.5) ttt.push_back(r.final_at);
    }
    check_cell(row[col("eval_acc@1_start")], start, 0.0005);
    check_cell(row[col("eval_acc@1")], acc1, 0.0005);
    check_cell(row[col("eval_acc@2")], acc2, 0.0005);
    check_cell(row[col("turns/pass")], tpp, 0.005);
    check_cell(row[col("activated_groups_%")], act, 0.05);
    check_cell(row[col("env_calls/step")], calls, 0.05);  // arm_b: 4.0 ± 0.0
    // Time to eval Acc@1 >= 0.5: two of three seeds of each arm get there.
    const std::string t = row[col("s_to_acc@1>=0.50")];
    CAPTURE(t);
    CHECK(t.find("(2/3 reached)") != std::string::npos);
    check_cell(t.substr(0, t.find(" (")), ttt, 0.05);
  }
  // One seed alone: a mean without a spread (and no switch columns: nothing differs).
  auto one = run_leap("--db " + db + " report --format csv --runs 20260101-000000-a001");
  REQUIRE(one.rc == 0);
  CHECK(one.out.find("arm_a (20260101-000000-a001),1,2,0.250,0.500,0.750,1.33,") != std::string::npos);
}

TEST_CASE("report: a single-turn arm (turns.max 1) has no activated-groups figure, a multi-turn one has") {
  leap::test::TempDir tmp;
  const std::string db = (tmp.path / "leap.db").string();
  {
    Store st(db);
    // Both arms' groups carry DCP flags (the trainer sets them either way); only turns.max differs.
    write_run(st, {"20260101-000000-c001", "single", true, 1, 1, 2, 0, 3, 100, 1}, 1000);
    write_run(st, {"20260101-000000-c002", "multi", true, 1, 1, 2, 0, 3, 100, 2}, 20000);
  }
  auto res = run_leap("--db " + db + " report --format csv");
  CAPTURE(res.err);
  REQUIRE(res.rc == 0);
  CAPTURE(res.out);
  std::stringstream lines(res.out);
  std::string header_line;
  std::getline(lines, header_line);
  const auto header = split_csv(header_line);
  size_t act = header.size();
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == "activated_groups_%") act = i;
  REQUIRE(act < header.size());
  std::map<std::string, std::vector<std::string>> rows;
  for (std::string l; std::getline(lines, l);)
    if (!l.empty()) rows[split_csv(l)[0].substr(0, split_csv(l)[0].find(' '))] = split_csv(l);
  REQUIRE(rows.count("single"));
  REQUIRE(rows.count("multi"));
  CHECK(rows["single"][act] == "-");
  CHECK(std::stod(rows["multi"][act]) == doctest::Approx(75.0));  // 3 of 4 groups
}

TEST_CASE("report: an arm's label counts distinct seeds and names runs that did not finish") {
  // A new user's report pooled a finished run and an interrupted 2-step one as "quickstart (2
  // seeds)", and two runs of one seed as 2 seeds (2026-12-07).
  std::vector<leap::report::RunSummary> runs(3);
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].run.id = "r" + std::to_string(i);
    runs[i].run.name = "quickstart";
    runs[i].run.status = RunStatus::finished;
    runs[i].run.seed = static_cast<int64_t>(i);
  }
  leap::report::Arm arm;
  arm.runs = {&runs[0]};
  CHECK(leap::report::arm_label(arm) == "quickstart (r0)");
  arm.runs = {&runs[0], &runs[1], &runs[2]};
  CHECK(leap::report::arm_label(arm) == "quickstart (3 seeds)");
  runs[2].run.seed = 1;
  runs[1].run.status = RunStatus::interrupted;
  CHECK(leap::report::arm_label(arm) == "quickstart (3 runs, 2 seeds, 1 interrupted)");
  runs[0].run.status = RunStatus::running;
  arm.runs = {&runs[0]};
  CHECK(leap::report::arm_label(arm) == "quickstart (r0, running)");
}

TEST_CASE("report: an evaluation added by leap eval --run is not the run's final or first evaluation") {
  // A tester's `leap eval --run R --bench kernelbench` (settings naming the model) became R's final
  // evaluation in the table, in place of the trainer's own (2026-12-07).
  leap::test::TempDir tmp;
  Store st((tmp.path / "leap.db").string());
  const RunSpec spec{"20260101-000000-c001", "arm_c", true, 1, 1, 2, 1, 0, 100};  // start 1/4, final 2/4 at turn 1
  write_run(st, spec, 1000);
  st.write_evaluation({spec.id, 2, "kernelbench", R"({"model": "results/x/checkpoints/step-2", "turns": 1})", 1200.0},
                      eval_rows(4, 0), {});
  st.write_evaluation({spec.id, 0, "kernelbench", R"({"model": "results/x/checkpoints/step-0", "turns": 1})", 1300.0},
                      eval_rows(0, 0), {});
  const leap::report::RunSummary r = leap::report::summarize_run(st, spec.id, 0);
  REQUIRE_FALSE(r.eval_acc.empty());
  CHECK(r.eval_acc[0] == doctest::Approx(2 / 4.0));
  CHECK(r.eval_acc1_start == doctest::Approx(1 / 4.0));
}

TEST_CASE("report: Acc@T counts a run that solved every task at turn 1 (T from the evaluation's settings)") {
  // A new user's arm showed eval_acc@1 0.875 and eval_acc@2 0.750 (2026-12-07): the seed that
  // solved 4 of 4 at turn 1 had no turn-2 rows, so it had no Acc@2 and left the mean.
  leap::test::TempDir tmp;
  Store st((tmp.path / "leap.db").string());
  RunInfo info;
  info.id = "20260101-000000-d001";
  info.name = "arm_d";
  info.config_yaml = "name: arm_d\n";
  info.started_at = 1000;
  st.create_run(info);
  st.write_evaluation({info.id, 2, "gen/eval", R"({"turns": 2, "samples": 1})", 1100.0}, eval_rows(4, 0), {});
  const leap::report::RunSummary r = leap::report::summarize_run(st, info.id, 0);
  REQUIRE(r.eval_acc.size() == 2);
  CHECK(r.eval_acc[0] == doctest::Approx(1.0));
  CHECK(r.eval_acc[1] == doctest::Approx(1.0));
  CHECK(r.turns == 2);
}

TEST_CASE("report: a run marked running whose writer is gone is labelled stopped, and the report says how to resume it") {
  // A SIGKILLed train (the OOM killer) left its run `running` in every report for good.
  leap::test::TempDir tmp;
  const std::string db = (tmp.path / "leap.db").string();
  RunInfo info;
  info.id = "20260101-000000-e001";
  info.name = "arm_e";
  info.config_yaml = "name: arm_e\n";
  info.started_at = 1000;
  RunLease live = leap::store::my_lease();  // this process: the writer is alive
  live.refreshed_at = 1000;
  info.lease = live;
  {
    Store st(db);
    st.create_run(info);
    auto r = leap::report::summarize_run(st, info.id, 0);
    CHECK(r.writer_gone.empty());
    leap::report::Arm arm;
    arm.runs = {&r};
    CHECK(leap::report::arm_label(arm) == "arm_e (20260101-000000-e001, running)");
    // The same pid started at another time: a reused pid, the writer is gone.
    RunLease dead = live;
    dead.process_started_at = live.process_started_at - 1000;
    st.db().exec("UPDATE runs SET lease_process_started_at = " + std::to_string(dead.process_started_at));
    r = leap::report::summarize_run(st, info.id, 0);
    CHECK(r.writer_gone.find("is now another process") != std::string::npos);
    CHECK(leap::report::arm_label(arm) == "arm_e (20260101-000000-e001, stopped (writer gone))");
  }
  const auto rep = run_leap("report --format csv --db " + db);
  REQUIRE_MESSAGE(rep.rc == 0, rep.err);
  CHECK(rep.out.find("stopped (writer gone)") != std::string::npos);
  CHECK(rep.err.find("leap train --resume 20260101-000000-e001") != std::string::npos);
}

TEST_CASE("report: a run stopped before any evaluation after step 0 has no final evaluation") {
  // A new user's run interrupted at step 9 had only its step-0 evaluation, which the table showed
  // (and pooled into its arm) as the final one (2026-12-08).
  leap::test::TempDir tmp;
  Store st((tmp.path / "leap.db").string());
  leap::test::SyntheticRun spec;
  spec.id = "20260101-000000-f001";
  spec.name = "arm_f";
  const std::string id = leap::test::write_synthetic_run(st, spec);
  auto full = leap::report::summarize_run(st, id, 0);
  REQUIRE_FALSE(full.eval_acc.empty());
  REQUIRE(full.eval_step.has_value());
  CHECK(*full.eval_step == 12);
  st.db().exec("DELETE FROM metrics WHERE name LIKE 'eval/%' AND step > 0");
  st.db().exec("DELETE FROM eval_results WHERE evaluation_id IN (SELECT id FROM evaluations WHERE step > 0)");
  st.db().exec("DELETE FROM evaluations WHERE step > 0");
  const auto cut = leap::report::summarize_run(st, id, 0);
  CHECK(cut.eval_acc.empty());
  CHECK_FALSE(cut.eval_step.has_value());
  CHECK(std::isnan(cut.eval_geomean_speedup));
  CHECK(cut.eval_acc1_start == doctest::Approx(full.eval_acc1_start));  // the start is still the start
}

TEST_CASE("report: arms that share a name are labelled by the switches that differ") {
  // A new user's `--set dcp.enabled=false` arm and the default one were both "quickstart (2 seeds)".
  std::vector<leap::report::RunSummary> runs(4);
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].run.id = "r" + std::to_string(i);
    runs[i].run.name = "quickstart";
    runs[i].run.status = RunStatus::finished;
    runs[i].run.seed = static_cast<int64_t>(i % 2);
    runs[i].config = {{"name", "quickstart"}, {"train.seed", std::to_string(i % 2)},
                      {"dcp.enabled", i < 2 ? "true" : "false"}, {"reward.kind", "rank"}};
  }
  const auto arms = leap::report::group_arms(runs);
  REQUIRE(arms.size() == 2);
  CHECK(arms[0].label == "quickstart [dcp.enabled=true] (2 seeds)");
  CHECK(arms[1].label == "quickstart [dcp.enabled=false] (2 seeds)");
}
