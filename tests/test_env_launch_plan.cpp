// Tests of launch-plan parsing (src/env/launch_plan.hpp) and binding (src/env/binding.hpp).
#include <doctest/doctest.h>

#include "env/binding.hpp"
#include "env/errors.hpp"
#include "env/launch_plan.hpp"

using namespace leap::env;

TEST_SUITE_BEGIN("env");

namespace {

TaskInterface softmax_task() {
  TaskInterface t;
  t.inputs = {{"x", DType::float32, {"B", "N"}}};
  t.outputs = {{"y", DType::float32, {"B", "N"}}};
  t.sizes = {{"B", 64}, {"N", 1000}};
  t.constants = {{"eps", 1e-5, ScalarType::float32}, {"alpha", 0.5, ScalarType::float64},
                 {"K", 3, ScalarType::int64}};
  return t;
}

std::string plan_error(const std::string& yaml, PlanParseOptions opt = {}) {
  try {
    parse_launch_plan(yaml, softmax_task(), opt);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string bind_error(const std::string& yaml, const LaunchLimits& limits = {},
                       const std::set<std::string>* exports = nullptr) {
  auto task = softmax_task();
  auto plan = parse_launch_plan(yaml, task);
  try {
    bind_plan(plan, task, limits, exports);
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "(no error)";
}

bool has(const std::string& s, const std::string& part) {
  if (s.find(part) != std::string::npos) return true;
  MESSAGE("'" << s << "' lacks '" << part << "'");
  return false;
}

}  // namespace

TEST_CASE("env: launch plan parses scratch, launches and arg kinds") {
  const char* yaml = R"(
scratch:
  row_max: {dtype: float32, shape: [B]}
  tmp: {dtype: int64, shape: []}
launches:
  - kernel: reduce_max
    grid: [B]
    block: [256]
    shared_bytes: 256 * 4
    args: [x, row_max, B, N]
  - kernel: softmax_rows
    grid: [ceil_div(N, 256), B]
    block: [256, 1, 1]
    args: [x, row_max, y, eps, alpha, K, numel(x), min(N, 512)]
)";
  auto task = softmax_task();
  auto plan = parse_launch_plan(yaml, task);
  REQUIRE(plan.scratch.size() == 2);
  CHECK(plan.scratch[0].name == "row_max");
  CHECK(plan.scratch[0].line == 3);
  CHECK(plan.scratch[1].dtype == DType::int64);
  CHECK(plan.scratch[1].shape.empty());
  REQUIRE(plan.launches.size() == 2);
  CHECK(plan.launches[0].signature() == "ppii");
  CHECK(plan.launches[0].line == 6);
  // The YAML flow list split `ceil_div(N, 256)` at its comma; it is rejoined.
  CHECK(plan.launches[1].grid.size() == 2);
  CHECK(plan.launches[1].signature() == "pppfdiii");
  CHECK(plan.launches[1].args.size() == 8);
  CHECK(plan.signatures() == std::vector<std::string>{"ppii", "pppfdiii"});

  auto bound = bind_plan(plan, task);
  REQUIRE(bound.tensors.size() == 4);
  CHECK(bound.tensors[0].shape == std::vector<int64_t>{64, 1000});
  CHECK(bound.tensors[2].name == "row_max");
  CHECK(bound.tensors[2].role == TensorRole::scratch);
  CHECK(bound.tensors[2].bytes() == 64 * 4);
  CHECK(bound.tensors[3].numel() == 1);
  const auto& l0 = bound.launches[0];
  CHECK(l0.grid == std::array<int64_t, 3>{64, 1, 1});
  CHECK(l0.block == std::array<int64_t, 3>{256, 1, 1});
  CHECK(l0.shared_bytes == 1024);
  const auto& l1 = bound.launches[1];
  CHECK(l1.grid == std::array<int64_t, 3>{4, 64, 1});
  CHECK(l1.shared_bytes == 0);
  CHECK(l1.args[0].tensor == 0);
  CHECK(l1.args[1].tensor == 2);
  CHECK(l1.args[2].tensor == 1);
  CHECK(l1.args[3].kind == ArgKind::float32);
  CHECK(l1.args[3].f == doctest::Approx(1e-5));
  CHECK(l1.args[4].kind == ArgKind::float64);
  CHECK(l1.args[4].f == 0.5);
  CHECK(l1.args[5].i == 3);
  CHECK(l1.args[6].i == 64000);
  CHECK(l1.args[7].i == 512);
}

TEST_CASE("env: launch plan format errors say what and where") {
  CHECK(has(plan_error("launches: [\n  {kernel: k, grid: [1], block: [1], args: [x]\n"), "not valid YAML: line"));
  CHECK(has(plan_error("- just a list\n"), "must be a YAML mapping"));
  CHECK(has(plan_error("scratch: {}\n"), "no `launches:`"));
  CHECK(has(plan_error("launches: []\n"), "empty"));
  CHECK(has(plan_error("launches:\n"), "empty"));
  CHECK(has(plan_error("launches: []\nstreams: 2\n"), "streams (line 2): unknown key"));
  CHECK(has(plan_error("launches:\n  - kernel: k\n    grid: [1]\n    block: [1]\n    args: []\n    stream: 1\n"),
            "launches[0].stream (line 6): unknown key"));
  CHECK(has(plan_error("launches:\n  - grid: [1]\n    block: [1]\n    args: []\n"), "missing `kernel`"));
  CHECK(has(plan_error("launches:\n  - {kernel: \"my kernel\", grid: [1], block: [1], args: []}\n"),
            "is not a function name"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [1, 1, 1, 1], block: [1], args: []}\n"),
            "launches[0].grid (line 2): has 4 dimensions; 1 to 3"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [], block: [1], args: []}\n"), "has 0 dimensions"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, block: [1], args: []}\n"), "missing `grid`"));
  PlanParseOptions cpu;
  cpu.require_grid_block = false;
  CHECK(plan_error("launches:\n  - {kernel: k, args: []}\n", cpu) == "(no error)");
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [1], block: [1]}\n"), "missing `args`"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [B +], block: [1], args: []}\n"),
            "launches[0].grid[0] (line 2): bad expression 'B +': column 4"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [1], block: [1], args: [x, ceil_div(N, 2]}\n"),
            "launches[0].args[1] (line 2): bad expression 'ceil_div(N, 2': column 14: expected ')' to close ceil_div("));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [Q], block: [1], args: []}\n"),
            "unknown size symbol 'Q' (size symbols: B, N, K)"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [1], block: [1], args: [z]}\n"),
            "unknown size symbol 'z'"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [numel(z)], block: [1], args: []}\n"),
            "unknown tensor 'z' (tensors: x, y)"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [x + 1], block: [1], args: []}\n"),
            "'x' is a tensor; use numel(x)"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [eps * 2], block: [1], args: []}\n"),
            "'eps' is a floating-point constant"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [1], block: [1], shared_bytes: [1], args: []}\n"),
            "shared_bytes (line 2): expected an expression"));
  CHECK(has(plan_error("launches:\n  - {kernel: k, grid: [1], block: [1], args: x}\n"), "must be a list"));
  CHECK(has(plan_error("launches:\n  - 3\n"), "each launch must be a mapping"));
  // Scratch errors.
  const std::string ok_launch = "launches:\n  - {kernel: k, grid: [1], block: [1], args: []}\n";
  CHECK(has(plan_error("scratch:\n  t: {dtype: float7, shape: [B]}\n" + ok_launch), "scratch.t.dtype (line 2): unknown dtype"));
  CHECK(has(plan_error("scratch:\n  x: {dtype: float32, shape: [B]}\n" + ok_launch), "already a task tensor"));
  CHECK(has(plan_error("scratch:\n  N: {dtype: float32, shape: [B]}\n" + ok_launch), "already a size symbol"));
  CHECK(has(plan_error("scratch:\n  t: {dtype: float32}\n" + ok_launch), "missing `shape`"));
  CHECK(has(plan_error("scratch:\n  t: {dtype: float32, shape: [B], init: 0}\n" + ok_launch),
            "scratch.t.init (line 2): unknown key"));
  CHECK(has(plan_error("scratch:\n  a: {dtype: float32, shape: [B]}\n  b: {dtype: float32, shape: [numel(a)]}\n" + ok_launch),
            "not 'a'"));
  CHECK(has(plan_error("scratch: [1]\n" + ok_launch), "must map names"));
  // Line numbers follow the answer when an offset is given.
  PlanParseOptions off;
  off.line_offset = 10;
  CHECK(has(plan_error("launches: []\nstreams: 2\n", off), "(line 12)"));
}

TEST_CASE("env: binding evaluates launches and reports launch errors") {
  auto task = softmax_task();
  CHECK(has(bind_error("launches:\n  - {kernel: k, grid: [B - 64], block: [1], args: []}\n"),
            "launches[0].grid[0] (line 2): 'B - 64' = 0; every grid dimension must be at least 1"));
  CHECK(has(bind_error("launches:\n  - {kernel: k, grid: [N / (B - 64)], block: [1], args: []}\n"),
            "division by zero"));
  CHECK(has(bind_error("launches:\n  - {kernel: k, grid: [1], block: [1], args: [N % (B - B)]}\n"),
            "args[0] (line 2): 'N % (B - B)' cannot be evaluated: division by zero (column 3)"));
  CHECK(has(bind_error("launches:\n  - {kernel: k, grid: [1], block: [1], shared_bytes: -4, args: []}\n"),
            "is negative"));
  LaunchLimits lim;
  lim.max_threads_per_block = 1024;
  lim.max_shared_bytes = 48 * 1024;
  lim.max_block = {1024, 1024, 64};
  lim.max_scratch_bytes = 1 << 20;
  CHECK(has(bind_error("launches:\n  - {kernel: k, grid: [1], block: [64, 32], args: []}\n", lim),
            "2048 threads per block exceed the limit of 1024"));
  CHECK(has(bind_error("launches:\n  - {kernel: k, grid: [1], block: [1], shared_bytes: 65536, args: []}\n", lim),
            "65536 bytes exceed the limit of 49152"));
  CHECK(has(bind_error("scratch:\n  big: {dtype: float64, shape: [N, N]}\n"
                       "launches:\n  - {kernel: k, grid: [1], block: [1], args: [big]}\n", lim),
            "scratch buffers need 8000000 bytes"));
  CHECK(has(bind_error("scratch:\n  t: {dtype: float32, shape: [B - 100]}\n"
                       "launches:\n  - {kernel: k, grid: [1], block: [1], args: []}\n"),
            "scratch.t.shape[0] (line 2): 'B - 100' = -36 is negative"));
  std::set<std::string> exports{"_Z7softmaxPfS_", "other"};
  CHECK(has(bind_error("launches:\n  - {kernel: softmax, grid: [1], block: [1], args: []}\n", {}, &exports),
            "unknown kernel 'softmax': the compiled code exports _Z7softmaxPfS_, other"));
  CHECK(has(bind_error("launches:\n  - {kernel: softmax, grid: [1], block: [1], args: []}\n", {}, &exports),
            "extern \"C\""));
  exports.insert("softmax");
  CHECK(bind_error("launches:\n  - {kernel: softmax, grid: [1], block: [1], args: []}\n", {}, &exports) ==
        "(no error)");
}

TEST_SUITE_END();
