// Experiment config: defaults, the reference file, every error kind, overrides, round trips.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "config/load.hpp"
#include "config/schema.hpp"
#include "support.hpp"
#include "util/error.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using namespace leap;
using namespace leap::config;

namespace {
/// The message of the ConfigError that parsing `yaml` throws ("" if none is thrown).
std::string error_of(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    parse_experiment(yaml, "exp.yaml", sets);
  } catch (const ConfigError& e) {
    CHECK(e.exit_code() == 2);
    return e.what();
  }
  return "";
}
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("config: configs/reference.yaml lists every key with its default") {
  const std::string path = LEAP_SOURCE_DIR "/configs/reference.yaml";
  std::string text = test::read_file(path);
  REQUIRE(!text.empty());
  Experiment parsed = parse_experiment(text, path);
  CHECK(to_yaml(parsed) == to_yaml(Experiment{}));
  std::vector<std::string> keys = leaf_keys(text, path);
  std::set<std::string> in_file(keys.begin(), keys.end());
  std::set<std::string> in_schema;
  for (const auto& f : schema()) in_schema.insert(f.path);
  CHECK(in_file == in_schema);
}

TEST_CASE("config: defaults match DESIGN.md") {
  Experiment e;
  CHECK(e.rollout.group_size == 8);
  CHECK(e.turns.max == 3);
  CHECK(e.turns.gamma == doctest::Approx(0.4));
  CHECK(e.dcp.min_fail_ratio == doctest::Approx(0.5));
  CHECK(e.dcp.max_fail_ratio == doctest::Approx(0.875));
  CHECK(e.loss.eps_low == doctest::Approx(0.2));
  CHECK(e.loss.eps_high == doctest::Approx(0.28));
  CHECK(e.loss.kl_beta == 0.0);
  CHECK(e.env.seeds == 5);
  CHECK(e.env.timing.suspicious_speedup == doctest::Approx(10.0));
}

TEST_CASE("config: values are read into the typed schema") {
  Experiment e = parse_experiment(R"(
name: my-run
model: {path: /ckpt/qwen, dtype: bf16}
dcp:
  enabled: false
  min_fail_ratio: 0.25
reward: {kind: binary, rank_keys: [speedup, tokens]}
tasks: {levels: [1, 2]}
eval: {fast_p: [1, 1.5]}
env:
  cpu: {threads: 2}
train:
  sft: {enabled: true, steps: 7, second_turn: 2, twin_solutions: 40, copy_steps: 300}
)",
                                  "exp.yaml");
  CHECK(e.name == "my-run");
  CHECK(e.model.path == "/ckpt/qwen");
  CHECK(e.model.dtype == "bf16");
  CHECK_FALSE(e.dcp.enabled);
  CHECK(e.dcp.min_fail_ratio == doctest::Approx(0.25));
  CHECK(e.dcp.max_fail_ratio == doctest::Approx(0.875));  // untouched default
  CHECK(e.reward.kind == "binary");
  CHECK(e.reward.rank_keys == std::vector<std::string>{"speedup", "tokens"});
  CHECK(e.tasks.levels == std::vector<int64_t>{1, 2});
  CHECK(e.eval.fast_p == std::vector<double>{1.0, 1.5});
  CHECK(e.env.cpu.threads == 2);
  CHECK(e.train.sft.enabled);
  CHECK(e.train.sft.steps == 7);
  CHECK(e.train.sft.second_turn == 2);
  CHECK(e.train.sft.twin_solutions == 40);
  CHECK(e.train.sft.mutants == 0);  // untouched default
  CHECK(e.train.sft.copy_steps == 300);
  CHECK(e.train.sft.copy_tokens == 64);  // untouched default
}

TEST_CASE("config: an unknown key names file, key path, line:column and the likely key") {
  std::string msg = error_of("dcp:\n  enabled: true\n  min_fail_ration: 0.5\n");
  CHECK(contains(msg, "exp.yaml:3:3"));
  CHECK(contains(msg, "'dcp.min_fail_ration'"));
  CHECK(contains(msg, "unknown key"));
  CHECK(contains(msg, "did you mean 'dcp.min_fail_ratio'"));
  CHECK(contains(error_of("modle:\n  path: x\n"), "exp.yaml:1:1: key 'modle': unknown key"));
  CHECK(contains(error_of("zzzzzzzz: 1\n"), "configs/reference.yaml lists every key"));
}

TEST_CASE("config: a wrong type names the key, the location and the expected type") {
  std::string msg = error_of("rollout:\n  group_size: eight\n");
  CHECK(contains(msg, "exp.yaml:2:15"));
  CHECK(contains(msg, "'rollout.group_size'"));
  CHECK(contains(msg, "expected an integer"));
  CHECK(contains(error_of("dcp: {enabled: maybe}"), "expected true or false, got 'maybe'"));
  CHECK(contains(error_of("rollout: {group_size: 2.5}"), "expected an integer"));
  CHECK(contains(error_of("rollout: {temperature: [1]}"), "expected a number in [0, 10], got a list"));
  CHECK(contains(error_of("dcp: 3\n"), "key 'dcp': expected a mapping (a section), got '3'"));
  CHECK(contains(error_of("tasks: {levels: 1}"), "expected a list of integers"));
  CHECK(contains(error_of("rollout:\n  group_size:\n"), "missing value"));
}

TEST_CASE("config: debugging trees and staged advantages need a reward defined on nodes") {
  // reward.kind defaults to rank, which ranks rollouts on their first-success turn.
  std::string msg = error_of("turns:\n  branch: 2\n");
  CHECK(contains(msg, "exp.yaml:2:3"));
  CHECK(contains(msg, "'turns.branch'"));
  CHECK(contains(msg, "use reward.kind binary, speedup or kernelgym"));
  CHECK(contains(error_of("reward: {tree: max}"), "'reward.tree'"));
  CHECK(contains(error_of("advantage: {kind: sae_projection}"), "'advantage.kind'"));
  CHECK(contains(error_of("reward: {kind: binary, tree: sum}"), "'reward.tree'"));
  CHECK(contains(error_of("advantage: {sae: {value: mean}}"), "'advantage.sae.value'"));
  CHECK(contains(error_of("turns: {branch: 17}"), "out of range"));
  CHECK(contains(error_of("turns: {max_env_calls: 8}"), "'turns.max_env_calls': 8 leaves no env call for a debugging turn"));
  CHECK(error_of("turns: {max_env_calls: 9}") == "");
  CHECK(error_of("turns: {max: 1, max_env_calls: 8}") == "");
  const auto e = config::parse_experiment(
      "reward: {kind: binary, tree: mean}\nturns: {branch: 3, max_env_calls: 20}\n"
      "advantage: {kind: sae, sae: {alpha: 0.25, value: optimistic}}\n", "exp.yaml");
  CHECK(e.turns.branch == 3);
  CHECK(e.turns.max_env_calls == 20);
  CHECK(e.reward.tree == "mean");
  CHECK(e.advantage.sae.alpha == 0.25);
  CHECK(e.advantage.sae.value == "optimistic");
}

TEST_CASE("config: an out-of-range value is refused with the allowed range") {
  std::string msg = error_of("dcp:\n  max_fail_ratio: 1.5\n");
  CHECK(contains(msg, "exp.yaml:2:19"));
  CHECK(contains(msg, "'dcp.max_fail_ratio'"));
  CHECK(contains(msg, "out of range: expected a number in [0, 1]"));
  CHECK(contains(error_of("rollout: {group_size: 1}"), "out of range"));
  CHECK(contains(error_of("train: {sft: {second_turn: 17}}"), "out of range"));
  CHECK(contains(error_of("train: {sft: {second_turn: -1}}"), "out of range"));
  CHECK(contains(error_of("train: {sft: {twin_solutions: -1}}"), "out of range"));
  CHECK(contains(error_of("train: {sft: {copy_tokens: 0}}"), "out of range"));
  CHECK(contains(error_of("train: {sft: {copy_steps: -1}}"), "out of range"));
  CHECK(contains(error_of("train: {sft: {teacher_error: 1.5, mutant_kinds: [literal]}}"), "out of range"));
  const std::string teacher = error_of("train:\n  sft: {teacher_error: 0.7}\n");
  CHECK(contains(teacher, "'train.sft.teacher_error'"));
  CHECK(contains(teacher, "needs train.sft.mutant_kinds"));
  CHECK(contains(teacher, "exp.yaml:2"));
  CHECK(contains(error_of("rollout: {top_p: 0}"), "in (0, 1]"));
  CHECK(contains(error_of("reward: {kind: rnak}"), "'rnak' is not allowed: expected one of rank, binary, speedup, kernelgym"));
  std::string item = error_of("tasks:\n  levels: [1, 9]\n");
  CHECK(contains(item, "exp.yaml:2:15"));  // the bad list item itself
  CHECK(contains(item, "out of range"));
}

TEST_CASE("config: YAML syntax errors, duplicates and a non-mapping top level") {
  CHECK(contains(error_of("dcp: {enabled: true\n"), "exp.yaml:"));
  CHECK(contains(error_of("dcp: {enabled: true\n"), "YAML syntax error"));
  CHECK(contains(error_of("dcp:\n  enabled: true\n  enabled: false\n"), "exp.yaml:3:3: key 'dcp.enabled': duplicate key"));
  CHECK(contains(error_of("- 1\n- 2\n"), "expected a mapping of sections at the top"));
  CHECK(error_of("") == "");  // an empty file is all defaults
}

TEST_CASE("config: cross-key checks point at the key that breaks them") {
  std::string msg = error_of("dcp:\n  min_fail_ratio: 0.9\n  max_fail_ratio: 0.5\n");
  CHECK(contains(msg, "exp.yaml:2:3: key 'dcp.min_fail_ratio'"));
  CHECK(contains(msg, "greater than dcp.max_fail_ratio"));
  CHECK(contains(error_of("reward: {rank_keys: [tokens, tokens]}"), "lists a key twice"));
  CHECK(contains(error_of("", {"dcp.min_fail_ratio=0.95"}), "--set dcp.min_fail_ratio=0.95: key 'dcp.min_fail_ratio'"));
}

TEST_CASE("config: --set overrides use the same validation") {
  Experiment e = parse_experiment("dcp: {enabled: true}\n", "exp.yaml",
                                  {"dcp.enabled=false", "rollout.group_size=4", "reward.rank_keys=[tokens]",
                                   "env.cpu.flags=-O2 -fPIC -shared", "model.path=models/x"});
  CHECK_FALSE(e.dcp.enabled);
  CHECK(e.rollout.group_size == 4);
  CHECK(e.reward.rank_keys == std::vector<std::string>{"tokens"});
  CHECK(e.env.cpu.flags == "-O2 -fPIC -shared");
  CHECK(e.model.path == "models/x");
  CHECK(contains(error_of("", {"dcp.enabeld=false"}), "--set dcp.enabeld=false: key 'dcp.enabeld': unknown key (did you mean 'dcp.enabled'?)"));
  CHECK(contains(error_of("", {"rollout.group_size=1"}), "--set rollout.group_size=1: key 'rollout.group_size': 1 is out of range"));
  CHECK(contains(error_of("", {"dcp=false"}), "is a section"));
  CHECK(contains(error_of("", {"nonsense"}), "expected key.path=value"));
  // the last override wins
  CHECK(parse_experiment("", "x", {"turns.max=2", "turns.max=5"}).turns.max == 5);
}

TEST_CASE("config: the resolved config serialises back to an equal config") {
  Experiment e = parse_experiment("", "x", {"dcp.enabled=false", "optim.lr=3.5e-7", "eval.fast_p=[0.5, 1.25]",
                                            "tasks.levels=[2]", "name=a: b # c"});
  std::string y = to_yaml(e);
  Experiment back = parse_experiment(y, "resolved.yaml");
  CHECK(to_yaml(back) == y);
  CHECK_FALSE(back.dcp.enabled);
  CHECK(back.optim.lr == doctest::Approx(3.5e-7));
  CHECK(back.name == "a: b # c");
  CHECK(config_hash(back) == config_hash(e));
  CHECK(config_hash(e) != config_hash(Experiment{}));
  CHECK(to_yaml(e, true).find("# Difficulty-Conditioned Pruning") != std::string::npos);
}

TEST_CASE("config: a missing file is a config error naming it") {
  try {
    load_experiment("/nonexistent/exp.yaml");
    FAIL("no error");
  } catch (const ConfigError& e) {
    CHECK(contains(e.what(), "/nonexistent/exp.yaml: cannot read"));
  }
}
