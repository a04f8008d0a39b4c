// The configs the project ships load, and the ablation arms differ only in their switch.
#include <doctest/doctest.h>

#include <string>

#include "config/experiment.hpp"
#include "config/load.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using namespace leap::config;

namespace {
const std::string kConfigs = std::string(LEAP_SOURCE_DIR) + "/configs/";
}

TEST_CASE("configs: quickstart and the qwen2.5-coder-1.5b config load and validate") {
  const Experiment q = load_experiment(kConfigs + "quickstart.yaml");
  CHECK(q.model.path == "models/tiny");
  CHECK(q.env.backend == "cpu");
  CHECK(q.train.sft.enabled);
  CHECK(q.train.sft.mutants == 1);
  CHECK(q.tasks.eval_split == "train");
  CHECK(q.dcp.enabled);
  CHECK(q.reward.kind == "rank");
  CHECK(q.compaction.enabled);
  const Experiment g = load_experiment(kConfigs + "qwen2.5-coder-1.5b.yaml");
  CHECK(g.env.backend == "cuda");
  CHECK(g.model.device == "cuda");
}

TEST_CASE("configs: each ablation arm differs from configs/ablations/leap.yaml only in its switch") {
  const Experiment leap = load_experiment(kConfigs + "ablations/leap.yaml");
  CHECK(leap.dcp.enabled);
  CHECK(leap.reward.kind == "rank");
  CHECK(leap.compaction.enabled);
  CHECK(leap.turns.max == 2);
  struct Arm {
    const char* file;
    void (*undo)(Experiment&, const Experiment&);
  };
  const Arm arms[] = {
      {"no_dcp", [](Experiment& e, const Experiment& l) { CHECK(!e.dcp.enabled); e.dcp.enabled = l.dcp.enabled; }},
      {"binary_reward",
       [](Experiment& e, const Experiment& l) { CHECK(e.reward.kind == "binary"); e.reward.kind = l.reward.kind; }},
      {"no_compaction",
       [](Experiment& e, const Experiment& l) { CHECK(!e.compaction.enabled); e.compaction.enabled = l.compaction.enabled; }},
      {"single_turn", [](Experiment& e, const Experiment& l) { CHECK(e.turns.max == 1); e.turns.max = l.turns.max; }},
  };
  for (const auto& arm : arms) {
    CAPTURE(arm.file);
    Experiment e = load_experiment(kConfigs + "ablations/" + arm.file + ".yaml");
    CHECK(e.name == arm.file);
    CHECK(to_yaml(e) != to_yaml(leap));
    arm.undo(e, leap);
    e.name = leap.name;
    CHECK(to_yaml(e) == to_yaml(leap));
  }
}

TEST_CASE("configs: the generated-family arms differ from configs/generated/mt_dcp_rank.yaml only in their switches") {
  const Experiment leap = load_experiment(kConfigs + "generated/mt_dcp_rank.yaml");
  CHECK(leap.dcp.enabled);
  CHECK(leap.reward.kind == "rank");
  CHECK(leap.turns.max == 2);
  CHECK(leap.tasks.eval_split == "eval");  // held-out programs
  CHECK(leap.model.path == "models/ewred_lines-sft");
  struct Arm {
    const char* file;
    void (*undo)(Experiment&, const Experiment&);
  };
  const Arm arms[] = {
      {"mt_rank", [](Experiment& e, const Experiment& l) { CHECK(!e.dcp.enabled); e.dcp.enabled = l.dcp.enabled; }},
      {"mt_binary",
       [](Experiment& e, const Experiment& l) {
         CHECK(!e.dcp.enabled);
         CHECK(e.reward.kind == "binary");
         e.dcp.enabled = l.dcp.enabled;
         e.reward.kind = l.reward.kind;
       }},
      {"st_grpo",
       [](Experiment& e, const Experiment& l) {
         CHECK(e.turns.max == 1);
         CHECK(e.reward.kind == "binary");
         e.turns.max = l.turns.max;
         e.reward.kind = l.reward.kind;
         e.dcp.enabled = l.dcp.enabled;
       }},
  };
  for (const auto& arm : arms) {
    CAPTURE(arm.file);
    Experiment e = load_experiment(kConfigs + "generated/" + arm.file + ".yaml");
    CHECK(e.name == arm.file);
    arm.undo(e, leap);
    e.name = leap.name;
    CHECK(to_yaml(e) == to_yaml(leap));
  }
  // The warm start trains and evaluates on the same task set and held-out split.
  const Experiment sft = load_experiment(kConfigs + "generated/sft.yaml");
  CHECK(sft.train.sft.enabled);
  CHECK(sft.train.steps == 1);        // one RL step, for the checkpoint and the evaluations ...
  CHECK(sft.optim.lr <= 1e-12);        // ... that cannot move the policy
  CHECK(sft.train.eval_every == 1);
  CHECK(sft.tasks.dir == leap.tasks.dir);
  CHECK(sft.tasks.eval_split == "eval");
  CHECK(sft.eval.turns == leap.eval.turns);
  // The multi-turn arms debug at turn 2: the warm start shows the policy a feedback turn
  // (second-turn examples), and no wrong turn-1 target.
  CHECK(sft.train.sft.second_turn >= 1);
  CHECK(sft.train.sft.mutants == 0);
}
