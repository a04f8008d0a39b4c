// Tests of the task format loader (src/tasks/): the starter set, splits, and malformed tasks.
#include <doctest/doctest.h>

#include <string>

#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using leap::tasks::load_task;
using leap::tasks::load_task_set;

TEST_SUITE_BEGIN("tasks");

namespace {

const char* kGood = R"(name: scale
level: 1
category: elementwise
prompt: |
  y = 2 * x
sizes: {N: 4096}
sizes_cpu: {N: 256}
inputs:
  x: {dtype: float32, shape: [N], init: {normal: {mean: 0, std: 1}}}
  idx: {dtype: int64, shape: [N], init: {randint: {low: 0, high: N}, strict: true}}
outputs:
  y: {dtype: float32, shape: [N]}
constants: {alpha: 2.0, n: {value: 3, dtype: int64}}
reference:
  torchscript: |
    def reference(x: Tensor, idx: Tensor) -> Tensor:
        return x * 2.0 + idx.float() * 0.0
tolerance: {atol: 1.0e-5, rtol: 1.0e-5}
)";

std::string replace(std::string s, const std::string& from, const std::string& to) {
  auto p = s.find(from);
  REQUIRE(p != std::string::npos);
  return s.replace(p, from.size(), to);
}

// Loads a task whose text is `text` and returns the error message (empty if it loaded).
std::string load_error(const std::string& text, std::string* file = nullptr) {
  leap::test::TempDir dir;
  std::string path = dir.write("t/task.yaml", text);
  if (file) *file = path;
  try {
    load_task(dir.path.string() + "/t");
  } catch (const leap::ConfigError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("tasks: a well-formed task loads with sizes, overrides, inits, constants and reference") {
  leap::test::TempDir dir;
  dir.write("t/task.yaml", kGood);
  auto t = load_task((dir.path / "t").string());
  CHECK(t.name == "scale");
  CHECK(t.level == 1);
  CHECK(t.sizes_for("cpu").at("N") == 256);
  CHECK(t.sizes_for("cuda").at("N") == 4096);
  REQUIRE(t.inputs.size() == 2);
  CHECK(t.inputs[1].dtype == "int64");
  CHECK(t.inputs[1].init.strict);
  CHECK(t.inputs[1].init.b == "N");
  CHECK(leap::tasks::InitSpec::value(t.inputs[1].init.b, t.sizes_for("cpu")) == 256);
  REQUIRE(t.constants.size() == 2);
  CHECK(t.constants[1].dtype == "int64");
  CHECK(contains(t.reference.torchscript, "def reference"));
  CHECK(t.tolerance.atol == doctest::Approx(1e-5));
  CHECK(t.hash.size() == 16);
}

TEST_CASE("tasks: the starter set loads with its split") {
  // One literal: GCC 12 warns a false -Warray-bounds on std::string(...) + "..." here.
  auto set = load_task_set(LEAP_SOURCE_DIR "/tasks/starter");
  CHECK(set.name == "starter");
  CHECK(set.tasks.size() == 29);
  CHECK(set.train.size() == 21);
  CHECK(set.eval.size() == 8);
  CHECK(set.split_of("softmax_rows") == "train");
  CHECK(set.split_of("rms_norm") == "eval");
  REQUIRE(set.find("cross_entropy") != nullptr);
  CHECK(set.find("cross_entropy")->inputs[1].init.strict);
}

TEST_CASE("tasks: malformed tasks name the file, the key and the line") {
  std::string file;
  SUBCASE("unknown key") {
    auto e = load_error(replace(kGood, "category: elementwise", "categroy: elementwise"), &file);
    CHECK(contains(e, file + ":3:"));
    CHECK(contains(e, "categroy"));
    CHECK(contains(e, "unknown key"));
  }
  SUBCASE("bad dtype") {
    auto e = load_error(replace(kGood, "y: {dtype: float32", "y: {dtype: float33"), &file);
    CHECK(contains(e, file + ":12:"));
    CHECK(contains(e, "outputs.y.dtype"));
    CHECK(contains(e, "float33"));
  }
  SUBCASE("missing reference") {
    std::string text = kGood;
    text = text.substr(0, text.find("reference:")) + "tolerance: {atol: 1.0e-5, rtol: 1.0e-5}\n";
    auto e = load_error(text, &file);
    CHECK(contains(e, file + ":1:"));
    CHECK(contains(e, "reference"));
    CHECK(contains(e, "missing"));
  }
  SUBCASE("reference file that does not exist") {
    std::string text = kGood;
    text = text.substr(0, text.find("  torchscript: |")) + "  file: nope.pt\n" + text.substr(text.find("tolerance:"));
    auto e = load_error(text, &file);
    CHECK(contains(e, file + ":15:"));
    CHECK(contains(e, "reference.file"));
    CHECK(contains(e, "nope.pt"));
  }
  SUBCASE("unknown shape symbol") {
    auto e = load_error(replace(kGood, "x: {dtype: float32, shape: [N]", "x: {dtype: float32, shape: [M, N]"), &file);
    CHECK(contains(e, file + ":9:"));
    CHECK(contains(e, "inputs.x.shape[0]"));
    CHECK(contains(e, "unknown size symbol 'M'"));
  }
  SUBCASE("init parameter that is neither a number nor a size") {
    auto e = load_error(replace(kGood, "high: N}", "high: Q}"), &file);
    CHECK(contains(e, "inputs.idx.init.randint.high"));
    CHECK(contains(e, file + ":10:"));
  }
  SUBCASE("override of an undeclared size") {
    auto e = load_error(replace(kGood, "sizes_cpu: {N: 256}", "sizes_cpu: {K: 256}"), &file);
    CHECK(contains(e, "sizes_cpu.K"));
    CHECK(contains(e, file + ":7:"));
  }
  SUBCASE("YAML syntax error") {
    auto e = load_error(replace(kGood, "sizes: {N: 4096}", "sizes: {N: 4096"), &file);
    CHECK(contains(e, file + ":"));
    CHECK(contains(e, "YAML syntax error"));
  }
}

TEST_CASE("tasks: set.yaml listing a task twice in a split is an error with its line") {
  // A red team's `train: [scale, scale]` was counted as 2 train tasks.
  leap::test::TempDir dir;
  dir.write("a/task.yaml", kGood);
  std::string set = dir.write("set.yaml", "name: mini\ntrain:\n  - scale\n  - scale\n");
  try {
    load_task_set(dir.path.string());
    FAIL("expected an error");
  } catch (const leap::ConfigError& e) {
    CHECK(contains(e.what(), set + ":4:"));
    CHECK(contains(e.what(), "train[1]"));
    CHECK(contains(e.what(), "listed twice"));
  }
  dir.write("set.yaml", "name: mini\ntrain:\n  - scale\neval:\n  - scale\n");  // in both splits: allowed
  CHECK(load_task_set(dir.path.string()).train.size() == 1);
}

TEST_CASE("tasks: set.yaml naming an unknown task is an error with its line") {
  leap::test::TempDir dir;
  dir.write("a/task.yaml", kGood);
  std::string set = dir.write("set.yaml", "name: mini\ntrain:\n  - scale\neval:\n  - nope\n");
  try {
    load_task_set(dir.path.string());
    FAIL("expected an error");
  } catch (const leap::ConfigError& e) {
    CHECK(contains(e.what(), set + ":5:"));
    CHECK(contains(e.what(), "nope"));
  }
}
