// Bounded-time fuzzing of the parsers of model output: the expression code (src/env/expr.hpp),
// the answer extractor (src/env/extract.hpp) and the launch-plan parser (src/env/launch_plan.hpp).
// Adversarial inputs (huge, deeply nested, invalid bytes) must give a format error naming the
// limit; random inputs must give a value or a format error, never another exception or a crash.
#include <doctest/doctest.h>

#include <chrono>
#include <random>
#include <string>

#include "env/errors.hpp"
#include "env/expr.hpp"
#include "env/extract.hpp"
#include "env/launch_plan.hpp"

using namespace leap::env;

TEST_SUITE_BEGIN("env");

namespace {

TaskInterface vadd_task() {
  TaskInterface t;
  t.inputs = {{"x", DType::float32, {"N"}}};
  t.outputs = {{"y", DType::float32, {"N"}}};
  t.sizes = {{"N", 1000}};
  t.constants = {{"K", 3, ScalarType::int64}};
  return t;
}

// The ExprError reason of parsing (and evaluating) `text`, or "(ok)".
std::string expr_outcome(const std::string& text) {
  try {
    ExprEnv env;
    env.symbols = {{"N", 1000}, {"a", 7}};
    env.shapes = {{"x", {4, 5}}};
    Expr::parse(text).eval(env);
    return "(ok)";
  } catch (const ExprError& e) {
    return e.reason();
  }
}

// The FormatError message of parsing `yaml` as a launch plan, or "(ok)".
std::string plan_outcome(const std::string& yaml) {
  try {
    parse_launch_plan(yaml, vadd_task());
    return "(ok)";
  } catch (const FormatError& e) {
    return e.what();
  }
}

// The FormatError message of extracting and parsing a whole answer, or "(ok)".
std::string answer_outcome(const std::string& answer) {
  try {
    ExtractedAnswer a = extract_answer(answer, CodeLanguage::cuda);
    PlanParseOptions po;
    po.line_offset = a.plan_line - 1;
    parse_launch_plan(a.plan_yaml, vadd_task(), po);
    return "(ok)";
  } catch (const FormatError& e) {
    return e.what();
  }
}

bool has(const std::string& s, const std::string& part) {
  if (s.find(part) != std::string::npos) return true;
  MESSAGE("'" << s.substr(0, 300) << "' lacks '" << part << "'");
  return false;
}

std::string repeat(const std::string& s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out += s;
  return out;
}

std::string answer_with_plan(const std::string& plan) {
  return "Here it is.\n```cuda\nextern \"C\" __global__ void k(float* y) {}\n```\n```yaml\n" + plan +
         "```\n";
}

std::string plan_with_grid(const std::string& expr) {
  return "launches:\n  - kernel: k\n    grid: [" + expr + "]\n    block: [256]\n    args: [y]\n";
}

}  // namespace

TEST_CASE("env: fuzz expr adversarial inputs are format errors naming the limit") {
  // About 200,000 terms, 30,000 nested parentheses, 100,000 unary minus signs: each was a stack
  // overflow in the recursive parser, evaluator or destructor.
  CHECK(has(expr_outcome(repeat("a+", 200000) + "a"), "the limit is 1024 characters"));
  CHECK(has(expr_outcome(repeat("(", 30000) + "1" + repeat(")", 30000)), "the limit is 1024 characters"));
  CHECK(has(expr_outcome(repeat("-", 100000) + "1"), "the limit is 1024 characters"));
  // Within the size limit, nesting is what stops them.
  CHECK(has(expr_outcome(repeat("(", 500) + "1" + repeat(")", 500)), "nests deeper than 64 levels"));
  CHECK(has(expr_outcome(repeat("-", 1000) + "1"), "nests deeper than 64 levels"));
  CHECK(has(expr_outcome(repeat("min(1,", 100) + "1" + repeat(")", 100)), "nests deeper than 64 levels"));
  // Just inside the limits, the expression works.
  CHECK(expr_outcome(repeat("(", 64) + "1" + repeat(")", 64)) == "(ok)");
  CHECK(expr_outcome(repeat("-", 64) + "1") == "(ok)");
  std::string long_sum = repeat("a+", 511) + "a";  // 1023 characters, a left-deep tree of 511 '+'
  CHECK(long_sum.size() <= kMaxExprChars);
  ExprEnv env;
  env.symbols = {{"a", 7}};
  CHECK(Expr::parse(long_sum).eval(env) == 7 * 512);
  CHECK(Expr::parse(long_sum).names().symbols.size() == 512);
  // Invalid bytes are named by value, so the message stays valid UTF-8.
  CHECK(has(expr_outcome("N + \xff"), "unexpected character byte 0xff"));
  CHECK(has(expr_outcome("N \x80"), "unexpected byte 0x80 after a complete expression"));
  CHECK(has(expr_outcome(std::string("N +\0 1", 6)), "byte 0x00"));
}

TEST_CASE("env: fuzz launch plans and answers past their limits are format errors") {
  // The expression limits through the plan (the grid is the model's text).
  CHECK(has(plan_outcome(plan_with_grid(repeat("N+", 20000) + "N")), "the limit is 1024 characters"));
  CHECK(has(plan_outcome(plan_with_grid(repeat("-", 1000) + "N")), "nests deeper than 64 levels"));
  CHECK(has(plan_outcome(plan_with_grid(repeat("N+", 200000) + "N")), "the limit is 65536 bytes"));
  // YAML nesting: flow collections are refused before yaml-cpp recurses; block ones hit its guard.
  CHECK(has(plan_outcome("launches: " + repeat("[", 30000) + repeat("]", 30000) + "\n"),
            "deeper than 32 levels (line 1)"));
  CHECK(has(plan_outcome("launches:\n" + repeat("- ", 30000) + "x\n"), "not valid YAML"));
  CHECK(has(plan_outcome("launches: " + repeat("{a: ", 40) + "1" + repeat("}", 40) + "\n"), "deeper than 32"));
  // Counts.
  std::string many = "launches:\n";
  for (int i = 0; i < 65; ++i) many += "  - {kernel: k, grid: [1], block: [1], args: [y]}\n";
  CHECK(has(plan_outcome(many), "has 65 launches; the limit is 64"));
  CHECK(has(plan_outcome("launches:\n  - {kernel: k, grid: [1], block: [1], args: [" + repeat("y, ", 200) + "y]}\n"),
            "has 201 arguments; the limit is 128"));
  std::string scratch = "scratch:\n";
  for (int i = 0; i < 65; ++i) scratch += "  s" + std::to_string(i) + ": {dtype: float32, shape: [N]}\n";
  CHECK(has(plan_outcome(scratch + "launches:\n  - {kernel: k, grid: [1], block: [1], args: [y]}\n"),
            "declares 65 buffers; the limit is 64"));
  // A key that is not a scalar was a yaml-cpp exception outside the format errors.
  CHECK(has(plan_outcome("? [a, b]\n: 1\nlaunches: []\n"), "a list or mapping where a name is expected"));
  CHECK(has(plan_outcome("launches:\n  - {? [k]: 1}\n"), "a list or mapping where a name is expected"));
  // Answers.
  CHECK(has(answer_outcome(std::string(kMaxAnswerBytes + 1, 'x')), "the limit is 1048576 bytes"));
  CHECK(has(answer_outcome("```cuda\n" + std::string(kMaxCodeBytes + 1, 'x') + "\n```\n```yaml\nlaunches: []\n```\n"),
            "the limit is 262144 bytes"));
  CHECK(answer_outcome(answer_with_plan(plan_with_grid("ceil_div(N, 256)"))) == "(ok)");
}

TEST_CASE("env: fuzz random and mutated inputs give a value or a format error, never a crash") {
  // Bounded in time (about 1.5 s in all) so that it runs in CI; the seed is printed on failure.
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 rng(seed);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<std::string> tokens = {"N", "a", "x", "1", "0", "9223372036854775807", "+", "-", "*", "/",
                                           "%", "(", ")", ",", " ", "ceil_div(", "min(", "max(", "numel(x)",
                                           "dim(x,", "dim(x, -1)", "\xff", "\xc3\xa9", "\n", "//", "**", "."};
  const std::string base = answer_with_plan(
      "scratch:\n  t: {dtype: float32, shape: [N]}\nlaunches:\n  - kernel: k\n    grid: [ceil_div(N, 256)]\n"
      "    block: [256]\n    args: [y, N, numel(x), K]\n");
  REQUIRE(answer_outcome(base) == "(ok)");
  const std::string yaml_bytes = "[]{}:-,? &*!|>'\"#%@`\n\t ";

  using clock = std::chrono::steady_clock;
  int exprs = 0, answers = 0, unexpected = 0;
  auto run_for = [&](double seconds, auto&& body) {
    auto end = clock::now() + std::chrono::duration<double>(seconds);
    while (clock::now() < end) body();
  };
  run_for(0.5, [&] {
    std::string t;
    size_t n = 1 + pick(pick(10) == 0 ? 400 : 20);
    for (size_t i = 0; i < n; ++i) t += tokens[pick(tokens.size())];
    try {
      expr_outcome(t);
    } catch (...) {
      ++unexpected;
    }
    ++exprs;
  });
  run_for(1.0, [&] {
    std::string a = base;
    size_t edits = 1 + pick(8);
    for (size_t i = 0; i < edits; ++i) {
      size_t at = pick(a.size() + 1);
      switch (pick(5)) {
        case 0: a.insert(at, 1, static_cast<char>(rng() & 0xff)); break;       // any byte
        case 1: a.insert(at, 1, yaml_bytes[pick(yaml_bytes.size())]); break;  // YAML syntax
        case 2: a.insert(at, tokens[pick(tokens.size())]); break;             // expression tokens
        case 3: if (at < a.size()) a.erase(at, 1 + pick(6)); break;
        case 4: a.insert(at, std::string(1 + pick(200), "([{-`"[pick(5)])); break;  // nesting runs
      }
    }
    try {
      answer_outcome(a);
    } catch (...) {
      ++unexpected;
    }
    ++answers;
  });
  MESSAGE(exprs << " expressions and " << answers << " answers fuzzed");
  CHECK(unexpected == 0);
  CHECK(exprs > 100);
  CHECK(answers > 100);
}
