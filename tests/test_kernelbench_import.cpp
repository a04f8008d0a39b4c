// `leap tasks import kernelbench` on the sample problems in ../shared/samples/kernelbench-style
// (read in place, never copied into the repository), then `leap tasks validate` on the result;
// and the task format's fixed-value inputs (`init: {file: ...}`) that the import relies on.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "env/reference.hpp"
#include "env/task_runtime.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using leap::test::run_leap;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

/// The shared samples folder: $LEAP_SHARED_DIR, else shared/ beside or inside the source folder.
fs::path samples_dir() {
  std::vector<fs::path> roots;
  if (const char* e = std::getenv("LEAP_SHARED_DIR"); e && *e) roots.push_back(e);
  roots.push_back(fs::path(LEAP_SOURCE_DIR) / ".." / "shared");
  roots.push_back(fs::path(LEAP_SOURCE_DIR) / "shared");
  for (const auto& r : roots)
    if (fs::is_directory(r / "samples" / "kernelbench-style")) return fs::canonical(r / "samples" / "kernelbench-style");
  return {};
}

const leap::tasks::TensorSpec* input(const leap::tasks::TaskSpec& t, const std::string& name) {
  for (const auto& i : t.inputs)
    if (i.name == name) return &i;
  return nullptr;
}

}  // namespace

TEST_CASE("kernelbench import: every sample problem is converted or listed with a reason, and validates") {
  const fs::path samples = samples_dir();
  if (samples.empty()) {
    MESSAGE("skipped: no shared/samples/kernelbench-style beside the source folder (set LEAP_SHARED_DIR)");
    return;
  }
  leap::test::TempDir tmp;
  const fs::path out = tmp.path / "kb";
  auto r = run_leap("tasks import kernelbench " + samples.string() + " --out " + out.string());
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  const std::string skipped = leap::test::read_file((out / "skipped.yaml").string());
  leap::tasks::TaskSet set = leap::tasks::load_task_set(out.string());
  size_t problems = 0;
  for (const auto& e : fs::directory_iterator(samples)) {
    if (e.path().extension() != ".py") continue;
    ++problems;
    const std::string f = e.path().filename().string();
    bool imported = false;
    for (const auto& t : set.tasks) imported = imported || (t.source.count("file") && contains(t.source.at("file"), f));
    CAPTURE(f);
    CHECK(imported != contains(skipped, f));  // exactly one of the two
  }
  CHECK(set.tasks.size() == problems);  // training-mode batch norm included (batch statistics)
  const auto* bn = set.find("007_batch_norm_train_mode");
  REQUIRE(bn);
  CHECK(contains(bn->source.at("batch_norm"), "batch statistics"));
  CHECK(bn->inputs.size() == 3);  // x, bn_weight, bn_bias: the running statistics are not read

  const auto* ce = set.find("003_cross_entropy_targets");
  REQUIRE(ce);
  REQUIRE(ce->inputs.size() == 2);
  CHECK(ce->inputs[0].name == "logits");  // names from forward's signature
  CHECK(ce->inputs[1].name == "targets");
  CHECK(ce->inputs[1].dtype == "int64");  // integer targets keep their dtype
  CHECK(ce->inputs[1].init.kind == leap::tasks::InitSpec::Kind::randint);
  CHECK(ce->inputs[1].init.b == "1000");  // torch.randint(0, classes, ...) with classes = 1000
  CHECK(ce->outputs[0].shape.empty());    // a 0-d loss
  CHECK(ce->source.at("problem_id") == "3");
  CHECK(ce->source.at("sha256").size() == 64);
  CHECK(contains(ce->prompt, "torch.nn.functional.cross_entropy(logits, targets)"));  // the source is the prompt

  const auto* lin = set.find("004_linear_gelu_scale");
  REQUIRE(lin);
  // x, then the parameters as fixed-value inputs: nn.Linear's uniform(-1/sqrt(512), 1/sqrt(512))
  // weights as a seed and that distribution, not a 2 MiB file.
  const auto* w = input(*lin, "linear_weight");
  REQUIRE(w);
  CHECK(w->init.kind == leap::tasks::InitSpec::Kind::uniform);
  REQUIRE(w->init.seed.has_value());
  CHECK(std::abs(std::stod(w->init.b) - 1.0 / std::sqrt(512.0)) < 1e-3);
  CHECK(std::stod(w->init.a) == -std::stod(w->init.b));
  CHECK(w->shape == std::vector<std::string>{"out_features", "in_features"});
  CHECK(input(*lin, "linear_bias"));
  CHECK(input(*lin, "scale"));
  CHECK(lin->outputs[0].shape == std::vector<std::string>{"batch", "out_features"});

  const auto* mask = set.find("006_masked_row_sum");
  REQUIRE(mask);
  CHECK(input(*mask, "mask")->dtype == "bool");
  const auto* sc = set.find("008_scale_by_scalar");
  REQUIRE(sc);
  REQUIRE(sc->constants.size() == 1);  // a Python float input becomes a constant
  CHECK(sc->constants[0].name == "s");
  CHECK(sc->constants[0].value == 2.5);

  auto v = run_leap("tasks validate " + out.string());
  CAPTURE(v.out);
  CHECK(v.rc == 0);
  CHECK(contains(v.out, "9 tasks: 0 with problems, 0 weak"));
}

TEST_CASE("task format: fixed-value inputs are read from their file, the same on every seed") {
  leap::test::TempDir tmp;
  const float w[4] = {1.0f, -2.0f, 3.5f, 0.25f};
  fs::create_directories(tmp.path / "t" / "weights");
  {
    std::ofstream f(tmp.path / "t" / "weights" / "w.bin", std::ios::binary);
    f.write(reinterpret_cast<const char*>(w), sizeof w);
  }
  tmp.write("t/task.yaml",
            "name: scale\nsizes: {N: 4}\ninputs:\n  x: {dtype: float32, shape: [N]}\n"
            "  w: {dtype: float32, shape: [N], init: {file: weights/w.bin}}\n"
            "outputs:\n  y: {dtype: float32, shape: [N]}\n"
            "source: {benchmark: kernelbench, problem_id: 7}\n"
            "reference:\n  torchscript: |\n    def reference(x: Tensor, w: Tensor) -> Tensor:\n        return x * w\n");
  auto spec = leap::tasks::load_task((tmp.path / "t").string());
  CHECK(spec.source.at("problem_id") == "7");
  leap::env::RuntimeTask rt(spec, "cpu");
  auto a = leap::env::make_inputs(rt, 1, 0), b = leap::env::make_inputs(rt, 2, 3);
  CHECK(a[1][2].item<float>() == 3.5f);
  CHECK(torch::equal(a[1], b[1]));
  CHECK_FALSE(torch::equal(a[0], b[0]));

  tmp.write("t/weights/w.bin", "12345678");  // 8 bytes, 16 needed
  leap::env::RuntimeTask bad(leap::tasks::load_task((tmp.path / "t").string()), "cpu");
  CHECK_THROWS_WITH_AS(leap::env::make_inputs(bad, 1, 0), doctest::Contains("holds 8 bytes"), leap::Error);

  tmp.write("t/task.yaml", "name: s\nsizes: {N: 4}\ninputs:\n  w: {dtype: float32, shape: [N], init: {file: nope.bin}}\n"
                           "outputs:\n  y: {dtype: float32, shape: [N]}\n"
                           "reference:\n  torchscript: |\n    def reference(w: Tensor) -> Tensor:\n        return w\n");
  CHECK_THROWS_WITH(leap::tasks::load_task((tmp.path / "t").string()), doctest::Contains("inputs.w.init.file: no such file"));
}

TEST_CASE("kernelbench import: a problem that hangs or calls exit() is skipped with its reason, the rest imports") {
  leap::test::TempDir tmp;
  const std::string model =
      "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n"
      "        super().__init__()\n\n    def forward(self, x):\n        return torch.relu(x)\n\n"
      "def get_inputs():\n    return [torch.randn(16, 32)]\n\ndef get_init_inputs():\n    return []\n";
  tmp.write("kb/1_Relu.py", model);
  tmp.write("kb/2_Hangs.py", "while True:\n    pass\n" + model);
  tmp.write("kb/3_Exits.py", "exit(3)\n" + model);
  const fs::path out = tmp.path / "out";
  auto r = run_leap("tasks import kernelbench " + (tmp.path / "kb").string() + " --out " + out.string() +
                    " --timeout 3");
  CAPTURE(r.out);
  CAPTURE(r.err);
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "1 problems imported"));
  const std::string skipped = leap::test::read_file((out / "skipped.yaml").string());
  CAPTURE(skipped);
  CHECK(contains(skipped, "2_Hangs.py"));
  CHECK(contains(skipped, "took longer than --timeout 3 s"));
  CHECK(contains(skipped, "3_Exits.py"));
  CHECK(contains(skipped, "the file calls exit(3)"));
  leap::tasks::TaskSet set = leap::tasks::load_task_set(out.string());
  REQUIRE(set.tasks.size() == 1);
  CHECK(set.tasks[0].name == "001_relu");
  CHECK_FALSE(fs::exists(out / "002_hangs"));  // nothing half-written
  CHECK_FALSE(fs::exists(out / "003_exits"));
}
