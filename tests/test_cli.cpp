// The `leap` binary end to end: help, exit codes, config errors, version, not-built commands.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "store/store.hpp"
#include "support.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using leap::test::run_leap;

namespace {
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("cli: leap --help lists every subcommand and the global options") {
  auto r = run_leap("--help");
  CHECK(r.rc == 0);
  for (const char* sub : {"train", "eval", "report", "tasks", "model", "version"}) CHECK(contains(r.out, sub));
  for (const char* opt : {"--db", "--results-dir", "--log-level"}) CHECK(contains(r.out, opt));
}

TEST_CASE("cli: each subcommand has a --help that shows its own flags") {
  CHECK(contains(run_leap("train --help").out, "--set"));
  CHECK(contains(run_leap("train --help").out, "--resume"));
  CHECK(contains(run_leap("eval --help").out, "--solutions"));
  CHECK(contains(run_leap("eval --help").out, "--bench"));
  CHECK(contains(run_leap("report --help").out, "--format"));
  CHECK(contains(run_leap("export --help").out, "--run"));
  CHECK(contains(run_leap("tasks --help").out, "validate"));
  CHECK(contains(run_leap("tasks import --help").out, "--levels"));
  CHECK(contains(run_leap("model --help").out, "generate"));
  CHECK(contains(run_leap("model generate --help").out, "--max-new-tokens"));
  CHECK(run_leap("version --help").rc == 0);
}

TEST_CASE("cli: bad usage exits 2") {
  CHECK(run_leap("").rc == 2);
  CHECK(run_leap("frobnicate").rc == 2);
  CHECK(run_leap("train").rc == 2);  // missing CONFIG
  CHECK(run_leap("eval --backend tpu --bench starter --model m").rc == 2);
  CHECK(run_leap("--log-level loud version").rc == 2);
  // An unknown command is named, with the nearest one (it said only "A subcommand is required").
  auto typo = run_leap("--db /tmp/x.db trian configs/quickstart.yaml");
  CHECK(typo.rc == 2);
  CHECK(contains(typo.err, "unknown command 'trian'"));
  CHECK(contains(typo.err, "did you mean 'train'?"));
  CHECK(run_leap("--db /tmp/x.db version").rc == 0);
}

TEST_CASE("cli: leap model names a missing checkpoint folder and an empty prompt as usage errors (exit 2)") {
  leap::test::TempDir tmp;
  const std::string none = (tmp.path / "none").string();
  for (const std::string& sub : {std::string("inspect ") + none, "tokenize " + none + " x", "generate " + none + " --prompt x"}) {
    CAPTURE(sub);
    auto r = run_leap("model " + sub);
    CHECK(r.rc == 2);
    CHECK(contains(r.err, "no checkpoint folder '" + none + "'"));
  }
  const std::string model = (leap::test::tiny_model() / "tiny").string();
  auto file = run_leap("model inspect " + model + "/config.json");
  CHECK(file.rc == 2);
  CHECK(contains(file.err, "it is a file"));
  auto empty = run_leap("model generate " + model + " --prompt '' --max-new-tokens 2");
  CHECK(empty.rc == 2);
  CHECK(contains(empty.err, "has no tokens"));
  CHECK(run_leap("model generate " + model + " --prompt '' --chat --max-new-tokens 2 --temperature 0").rc == 0);
}

TEST_CASE("cli: model init outside the checkout trains its tokenizer on the checkout's tasks, and warns of an empty corpus") {
  // A new user's `model init` in /tmp found no ./tasks and trained the tokenizer on the built-in
  // text alone, silently: the quickstart then learned nothing (2026-12-08).
  leap::test::TempDir tmp;
  const std::string cd = "cd '" + tmp.path.string() + "' && ";
  auto r = run_leap("model init --out " + (tmp.path / "m").string(), cd);
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(contains(r.out, "under " LEAP_SOURCE_DIR "/tasks)"));
  CHECK_FALSE(contains(r.out, "trained on 0 files"));
  CHECK_FALSE(contains(r.err, "holds no task.yaml"));
  std::filesystem::create_directories(tmp.path / "empty");
  auto e = run_leap("model init --out " + (tmp.path / "m2").string() + " --corpus " + (tmp.path / "empty").string(), cd);
  REQUIRE_MESSAGE(e.rc == 0, e.err);
  CHECK(contains(e.out, "trained on 0 files"));
  CHECK(contains(e.err, "holds no task.yaml or solutions"));
}

TEST_CASE("cli: out-of-range or non-finite option values are usage errors (exit 2) naming the option") {
  leap::test::TempDir tmp;
  struct Case {
    std::string args, says;
  };
  const std::vector<Case> cases = {
      {"model generate " + tmp.path.string() + " --prompt x --temperature nan", "--temperature: 'nan' is not a finite number"},
      {"model generate " + tmp.path.string() + " --prompt x --top-p 2", "--top-p: '2' is not a finite number in [1e-09, 1]"},
      {"model generate " + tmp.path.string() + " --prompt x --max-new-tokens -5", "--max-new-tokens: Value -5 not in range"},
      {"model generate " + tmp.path.string() + " --prompt x --top-k -1", "--top-k"},
      {"eval --bench starter --model m --turns 0", "--turns: Value 0 not in range 1 to 64"},
      {"eval --bench starter --model m --samples -1", "--samples: Value -1 not in range"},
      {"model init --out " + (tmp.path / "m").string() + " --corpus " + (tmp.path / "none").string(),
       "--corpus: Directory does not exist"},
      {"tasks import kernelbench " + tmp.path.string() + " --timeout -1", "--timeout"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.args);
    auto r = run_leap(c.args);
    CAPTURE(r.err);
    CHECK(r.rc == 2);
    CHECK(contains(r.err, c.says));
  }
  CHECK_FALSE(std::filesystem::exists(tmp.path / "m"));  // nothing written by the refused init
  const std::string db = tmp.write("leap.db", "");
  auto runs = run_leap("report --db " + db + " --runs ,");
  CHECK(runs.rc == 2);
  CHECK(contains(runs.err, "--runs ',': no run id in it"));
  auto dir_db = run_leap("report --db " + tmp.path.string() + " --runs x");
  CHECK(dir_db.rc != 0);
  CHECK(contains(dir_db.err, "is a folder; give the path of the database file"));
}

TEST_CASE("cli: a config with a typo'd key fails with file, key path and line:column, exit 2") {
  leap::test::TempDir tmp;
  std::string cfg = tmp.write("typo.yaml", "name: t\nrollout:\n  group_size: 8\n  temprature: 0.7\n");
  auto r = run_leap("train " + cfg);
  CHECK(r.rc == 2);
  CHECK(contains(r.err, cfg + ":4:3: key 'rollout.temprature': unknown key (did you mean 'rollout.temperature'?)"));
  auto s = run_leap("train " + tmp.write("ok.yaml", "name: t\n") + " --set rollout.group_size=zero");
  CHECK(s.rc == 2);
  CHECK(contains(s.err, "--set rollout.group_size=zero"));
}

TEST_CASE("cli: train --print-config prints the resolved config with overrides applied") {
  leap::test::TempDir tmp;
  std::string cfg = tmp.write("exp.yaml", "name: printed\ndcp: {enabled: true}\n");
  auto r = run_leap("train " + cfg + " --set dcp.enabled=false --print-config");
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "name: \"printed\""));
  CHECK(contains(r.out, "dcp:\n  enabled: false"));
  // --annotate alone is a usage error, not a training run (a new user's slip, 2026-12-07).
  auto a = run_leap("train " + cfg + " --annotate");
  CHECK(a.rc == 2);
  CHECK(contains(a.err, "--annotate requires --print-config"));
}

TEST_CASE("cli: train with a missing model folder or an unknown run names it and exits non-zero") {
  leap::test::TempDir tmp;
  std::string cfg = tmp.write("exp.yaml", "name: t\nmodel: {path: " + (tmp.path / "no-model").string() +
                                              "}\ntasks: {limit: 1}\n");
  const std::string db = (tmp.path / "leap.db").string();
  auto r = run_leap("train " + cfg + " --db " + db + " --results-dir " + (tmp.path / "results").string());
  CHECK(r.rc == 2);
  CHECK(contains(r.err, cfg + ": key 'model.path': no model folder '" + (tmp.path / "no-model").string() + "'"));
  // Nothing is created before the folders are checked: no store, no results folder.
  CHECK_FALSE(std::filesystem::exists(db));
  CHECK_FALSE(std::filesystem::exists(tmp.path / "results"));
  std::string no_tasks = tmp.write("no-tasks.yaml", "name: t\nmodel: {path: " + tmp.path.string() + "}\ntasks: {dir: " +
                                                        (tmp.path / "no-tasks").string() + "}\n");
  auto t = run_leap("train " + no_tasks + " --db " + db + " --results-dir " + (tmp.path / "results").string());
  CHECK(t.rc == 2);
  CHECK(contains(t.err, no_tasks + ": key 'tasks.dir': no task folder '" + (tmp.path / "no-tasks").string() + "'"));
  CHECK_FALSE(std::filesystem::exists(db));
  auto no_store = run_leap("train " + cfg + " --db " + db + " --resume 20260101-000000-abcd");
  CHECK(no_store.rc == 2);
  CHECK(contains(no_store.err, "--resume: no store at " + db));
  CHECK_FALSE(std::filesystem::exists(db));
  { leap::store::Store created(db); }
  auto resume = run_leap("train " + cfg + " --db " + db + " --resume 20260101-000000-abcd");
  CHECK(resume.rc == 2);
  CHECK(contains(resume.err, "no run '20260101-000000-abcd'"));
  auto with_set = run_leap("train " + cfg + " --db " + db + " --resume 20260101-000000-abcd --set train.steps=2");
  CHECK(with_set.rc == 2);
  CHECK(contains(with_set.err, "only dist.* keys"));
  // leap eval --run reads an existing store, and creates none (a red team found an empty one made).
  const std::string other = (tmp.path / "other.db").string();
  auto eval_run = run_leap("eval --bench starter --run 20260101-000000-abcd --limit 1 --db " + other);
  CHECK(eval_run.rc == 2);
  CHECK(contains(eval_run.err, "leap eval --run: no store at " + other));
  CHECK_FALSE(std::filesystem::exists(other));
}

TEST_CASE("cli: leap version reports version, commit, LibTorch, CUDA and NVRTC") {
  auto r = run_leap("version");
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "leap " LEAP_VERSION));
  CHECK(contains(r.out, "git commit: "));
  CHECK(contains(r.out, "libtorch: 2.11.0"));
  CHECK(contains(r.out, "cuda: "));
  CHECK(contains(r.out, "nvrtc: "));
}

TEST_CASE("cli: leap loads LibTorch's OpenMP with a short spin unless OMP_WAIT_POLICY or GOMP_SPINCOUNT is set") {
  // OMP_DISPLAY_ENV=VERBOSE makes libgomp print the settings it was loaded with (once per load; leap
  // restarts itself once): what counts is the spin count the OpenMP runtime itself uses. libgomp's
  // default spins 300000 times at a barrier before it sleeps; leap asks for 300 (util/omp_policy.hpp).
  auto last_spin = [](const std::string& text) {
    const std::string key = "GOMP_SPINCOUNT = '";
    const size_t at = text.rfind(key);
    return at == std::string::npos ? std::string("(none)") : text.substr(at + key.size(), text.find('\'', at + key.size()) - at - key.size());
  };
  auto unset = run_leap("version", "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=VERBOSE");
  CAPTURE(unset.err);
  REQUIRE(unset.rc == 0);
  CHECK(last_spin(unset.err) == "300");
  CHECK(contains(unset.out, "openmp wait: GOMP_SPINCOUNT=300"));
  auto passive = run_leap("version", "env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=PASSIVE OMP_DISPLAY_ENV=VERBOSE");
  CAPTURE(passive.err);
  REQUIRE(passive.rc == 0);
  CHECK(last_spin(passive.err) == "0");  // the user's choice is kept
  CHECK(contains(passive.out, "openmp wait: OMP_WAIT_POLICY=PASSIVE"));
  auto active = run_leap("version", "env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=ACTIVE OMP_DISPLAY_ENV=VERBOSE");
  CAPTURE(active.err);
  REQUIRE(active.rc == 0);
  CHECK(contains(active.err, "OMP_WAIT_POLICY = 'ACTIVE'"));
  CHECK(last_spin(active.err) != "300");
  // Commands that run no policy are not restarted: libgomp keeps its default there.
  auto other = run_leap("tasks --help", "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=VERBOSE");
  CHECK(last_spin(other.err) == "300000");
}

TEST_CASE("cli: the train summary gives one figure for one step and says when no step ran") {
  leap::test::TempDir tmp;
  const std::string model = (leap::test::tiny_model() / "tiny").string();
  const std::string cfg = tmp.write(
      "exp.yaml", "name: t\nmodel: {path: " + model + "}\ntasks: {limit: 2, eval_split: train}\n"
                  "env: {workers: 1, seeds: 1, timing: {warmup: 0, trials: 1, max_seconds: 0.05}}\n"
                  "rollout: {tasks_per_step: 1, group_size: 2, max_new_tokens: 8}\nturns: {max: 1}\n"
                  "reward: {kind: binary}\neval: {turns: 1, samples: 1}\n"
                  "train: {steps: 1, eval_every: 0, checkpoint_every: 0, mini_batch_size: 2}\n");
  const std::string where = " --db " + (tmp.path / "leap.db").string() + " --results-dir " + (tmp.path / "r").string();
  auto one = run_leap("train " + cfg + where);
  CAPTURE(one.err);
  REQUIRE(one.rc == 0);
  CHECK(contains(one.out, "  mean reward        step 1: "));
  // One figure per line (mean reward, train acc@1), not "step 1: x   step 1: x".
  size_t n = 0;
  for (size_t at = one.out.find("step 1: "); at != std::string::npos; at = one.out.find("step 1: ", at + 1)) ++n;
  CHECK(n == 2);
  auto none = run_leap("train " + cfg + where + " --set train.steps=0");
  CAPTURE(none.err);
  REQUIRE(none.rc == 0);
  CHECK(contains(none.out, "no step (train.steps: 0): only the evaluation ran"));
  CHECK_FALSE(contains(none.out, "before this resume"));
}

TEST_CASE("cli: a train that fails before its run row exists leaves no store it created") {
  leap::test::TempDir tmp;
  // The tiny model with its weights cut short: the model fails to load, after the store opened.
  const std::filesystem::path model = tmp.path / "broken";
  std::filesystem::copy(leap::test::tiny_model() / "tiny", model);
  std::filesystem::resize_file(model / "model.safetensors", 4096);
  const std::string cfg = tmp.write("exp.yaml", "name: t\nmodel: {path: " + model.string() +
                                                    "}\ntasks: {limit: 1}\nenv: {workers: 1}\n");
  const std::string db = (tmp.path / "leap.db").string();
  auto r = run_leap("train " + cfg + " --db " + db + " --results-dir " + (tmp.path / "r").string());
  CAPTURE(r.err);
  CHECK(r.rc != 0);
  CHECK(contains(r.err, "model.safetensors"));
  CHECK_FALSE(std::filesystem::exists(db));
  CHECK_FALSE(std::filesystem::exists(db + "-wal"));
  // A store that was there before is kept as it was, runs and all.
  { leap::store::Store created(db); }
  auto again = run_leap("train " + cfg + " --db " + db + " --results-dir " + (tmp.path / "r").string());
  CHECK(again.rc != 0);
  CHECK(std::filesystem::exists(db));
}

TEST_CASE("cli: the store is leap.db in --results-dir unless --db is given") {
  // A tester's `--results-dir /tmp/x` wrote run folders there and rows to ./results/leap.db.
  leap::test::TempDir tmp;
  const std::string res = (tmp.path / "res").string();
  auto r = run_leap("--results-dir " + res + " report");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "no store at " + res + "/leap.db"));
  auto after = run_leap("report --results-dir " + res);  // after the subcommand too
  CHECK(contains(after.err, "no store at " + res + "/leap.db"));
  const std::string db = (tmp.path / "other.db").string();
  auto given = run_leap("--results-dir " + res + " --db " + db + " report");
  CHECK(contains(given.err, "no store at " + db));
}

TEST_CASE("cli: a --db file that is not a leap store is bad input (exit 2), like a missing one") {
  leap::test::TempDir tmp;
  const std::string empty = tmp.write("empty.db", "");
  auto r = run_leap("--db " + empty + " report");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "not a leap store"));
  CHECK(run_leap("--db " + (tmp.path / "missing.db").string() + " report").rc == 2);
  auto e = run_leap("--db " + empty + " export --run x --out " + (tmp.path / "x.jsonl").string());
  CHECK(e.rc == 2);
}
