// rl/mutants: the one-edit copies behind train.sft.mutants, by hand on small code blocks and
// through the real cpu environment on starter solutions.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/environment.hpp"
#include "config/schema.hpp"
#include "env/task_runtime.hpp"
#include "rl/grader.hpp"
#include "rl/mutants.hpp"
#include "support.hpp"
#include "tasks/task_spec.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

namespace fs = std::filesystem;
using namespace leap;

namespace {

const std::string kStarter = std::string(LEAP_SOURCE_DIR) + "/tasks/starter";

std::string cpu_solution(const std::string& task) {
  for (const auto& e : fs::directory_iterator(kStarter + "/" + task + "/solutions"))
    if (e.path().filename().string().rfind("cpu_", 0) == 0) {
      std::ifstream in(e.path());
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    }
  return {};
}

}  // namespace

TEST_CASE("mutants: each edit kind, in source order, loop headers, subscripts and comments untouched") {
  const std::string head = "Prose with a + b.\n\n```cpp\n";
  const std::string tail = "```\n\n```yaml\nlaunches:\n  - {kernel: f, grid: [1], block: [1], args: [x]}\n```\n";
  const std::string code =
      "#include <cmath>\n"
      "extern \"C\" void f(const float* x, float* y, int64_t n) {\n"
      "    float a = b + c * 0.5f;  // x + y\n"
      "    acc += std::exp(v);\n"
      "    for (int i = 0; i < n; ++i) s = fmaxf(s, x[i - 1]);\n"
      "    y[0] = v > 0.0f ? v : 0.0f;\n"
      "    z *= w <= 1.0f;\n"
      "}\n";
  const auto ms = rl::solution_mutants(head + code + tail);
  std::vector<std::string> edits, lines, kinds;
  for (const auto& m : ms) {
    edits.push_back(m.edit);
    kinds.push_back(m.kind);
    REQUIRE(m.text.size() > head.size() + tail.size());
    CHECK(m.text.substr(0, head.size()) == head);  // prose and launch plan are never edited
    CHECK(m.text.substr(m.text.size() - tail.size()) == tail);
    // exactly one code line differs
    std::istringstream a(code), b(m.text.substr(head.size(), m.text.size() - head.size() - tail.size()));
    std::string la, lb;
    int differ = 0;
    while (std::getline(a, la) && std::getline(b, lb))
      if (la != lb) {
        ++differ;
        lines.push_back(lb);
      }
    CHECK(differ == 1);
  }
  const std::vector<std::string> want_edits = {
      "line 3: '+' -> '-'",      "line 3: '*' -> '/'",   "line 3: '0.5f' -> '1.0f'", "line 4: '+=' -> '-='",
      "line 4: 'exp' -> 'expm1'", "line 5: 'fmaxf' -> 'fminf'", "line 6: '>' -> '<'", "line 7: '*=' -> '/='", "line 7: '<=' -> '>='", "line 7: '1.0f' -> '2.0f'"};
  CHECK(edits == want_edits);
  // train.sft.mutant_kinds selects twins by these
  const std::vector<std::string> want_kinds = {"arithmetic", "arithmetic", "literal",   "compound",
                                               "function",   "function",   "comparison", "compound", "comparison", "literal"};
  CHECK(kinds == want_kinds);
  const std::vector<std::string> want_lines = {
      "    float a = b - c * 0.5f;  // x + y",
      "    float a = b + c / 0.5f;  // x + y",
      "    float a = b + c * 1.0f;  // x + y",
      "    acc -= std::exp(v);",
      "    acc += std::expm1(v);",
      "    for (int i = 0; i < n; ++i) s = fminf(s, x[i - 1]);",
      "    y[0] = v < 0.0f ? v : 0.0f;",
      "    z /= w <= 1.0f;",
      "    z *= w >= 1.0f;",
      "    z *= w <= 2.0f;"};
  CHECK(lines == want_lines);

  CHECK(rl::solution_mutants("no code block here").empty());
  CHECK(rl::solution_mutants("```cpp\n```\n").empty());
  CHECK(rl::solution_mutants("```cpp\nint main() { return 0; }\n```\n").empty());  // nothing to edit
}

TEST_CASE("mutants: systematic_twin applies every edit of the listed kinds at once, nothing else") {
  const std::string head = "Prose with a + b > c.\n\n```cpp\n";
  const std::string tail = "```\n\n```yaml\nlaunches:\n  - {kernel: f, grid: [1], block: [1], args: [x]}\n```\n";
  const std::string code =
      "extern \"C\" void f(const float* x, float* y, int64_t n) {\n"
      "    for (int i = 0; i < n; ++i) {\n"
      "        float v = x[i + 1];  // a > b\n"
      "        v = v > 0.0f ? v : v * 0.5f;\n"
      "        v = 1.0f / (1.0f + std::exp(-v));\n"
      "        acc = v > acc ? v : acc;\n"
      "        y[i] = v + 2.0f;\n"
      "    }\n"
      "}\n";
  const std::string solution = head + code + tail;
  // Written by hand: each line's sites of the kind, all edited; loop header, subscripts, comments,
  // prose and launch plan untouched.
  const std::string comparisons = head +
      "extern \"C\" void f(const float* x, float* y, int64_t n) {\n"
      "    for (int i = 0; i < n; ++i) {\n"
      "        float v = x[i + 1];  // a > b\n"
      "        v = v < 0.0f ? v : v * 0.5f;\n"
      "        v = 1.0f / (1.0f + std::exp(-v));\n"
      "        acc = v < acc ? v : acc;\n"
      "        y[i] = v + 2.0f;\n"
      "    }\n"
      "}\n" + tail;
  CHECK(rl::systematic_twin(solution, {"comparison"}) == comparisons);
  const std::string arithmetic_literal = head +
      "extern \"C\" void f(const float* x, float* y, int64_t n) {\n"
      "    for (int i = 0; i < n; ++i) {\n"
      "        float v = x[i + 1];  // a > b\n"
      "        v = v > 0.0f ? v : v / 1.0f;\n"
      "        v = 2.0f * (2.0f - std::exp(-v));\n"
      "        acc = v > acc ? v : acc;\n"
      "        y[i] = v - 4.0f;\n"
      "    }\n"
      "}\n" + tail;
  CHECK(rl::systematic_twin(solution, {"arithmetic", "literal"}) == arithmetic_literal);
  const std::string function = head +
      "extern \"C\" void f(const float* x, float* y, int64_t n) {\n"
      "    for (int i = 0; i < n; ++i) {\n"
      "        float v = x[i + 1];  // a > b\n"
      "        v = v > 0.0f ? v : v * 0.5f;\n"
      "        v = 1.0f / (1.0f + std::expm1(-v));\n"
      "        acc = v > acc ? v : acc;\n"
      "        y[i] = v + 2.0f;\n"
      "    }\n"
      "}\n" + tail;
  CHECK(rl::systematic_twin(solution, {"function"}) == function);
  // Each one-edit mutant of a kind is one of the systematic twin's edits: applying all of them one
  // by one gives the twin (every site of the kind is in a different place).
  std::string by_one = solution;
  for (const auto& m : rl::solution_mutants(solution))
    if (m.kind == std::string("comparison")) {
      size_t at = 0;
      while (at < solution.size() && solution[at] == m.text[at]) ++at;  // the edit's place in the text
      by_one.replace(at, 1, m.text.substr(at, 1));
    }
  CHECK(by_one == comparisons);
  CHECK(rl::systematic_twin(solution, {"compound"}) == solution);  // no site of the kind
  CHECK(rl::systematic_twin(solution, {}) == solution);
  CHECK(rl::systematic_twin("no code block > here", {"comparison"}) == "no code block > here");
}

TEST_CASE("mutants: the config key train.sft.mutant_kinds allows exactly the kinds mutants carry") {
  const auto* field = config::find_field("train.sft.mutant_kinds");
  REQUIRE(field != nullptr);
  CHECK(field->choices == std::vector<std::string>(std::begin(rl::kMutantKinds), std::end(rl::kMutantKinds)));
}

TEST_CASE("mutants: the starter relu, silu and tanh cpu solutions' mutants are all judged wrong by the cpu environment") {
  test::TempDir dir;
  config::EnvConfig e;
  e.workers = 2;
  e.seeds = 2;
  e.cache_dir = (dir.path / "cache").string();
  e.cpu.flags = "-O1 -fPIC -shared";
  e.timing.warmup = 1;
  e.timing.trials = 1;
  e.timing.max_seconds = 0.1;
  e.run_timeout_s = 60;
  auto env = cli::make_environment(e, "cpu");
  rl::VerifierGrader grader(*env->verifier, 2);
  std::vector<std::unique_ptr<env::RuntimeTask>> tasks;
  std::vector<rl::GradeRequest> requests;
  std::vector<std::string> names;
  for (const char* name : {"relu", "silu", "tanh"}) {
    tasks.push_back(std::make_unique<env::RuntimeTask>(tasks::load_task(kStarter + "/" + name), "cpu"));
    const std::string sol = cpu_solution(name);
    REQUIRE(!sol.empty());
    requests.push_back({tasks.back().get(), sol});  // the shipped solution itself: correct
    names.push_back(std::string(name) + " (shipped)");
    const auto ms = rl::solution_mutants(sol);
    CHECK(!ms.empty());
    for (const auto& m : ms) {
      requests.push_back({tasks.back().get(), m.text});
      names.push_back(std::string(name) + " " + m.edit);
    }
  }
  const auto results = grader.grade(requests);
  REQUIRE(results.size() == requests.size());
  int wrong_output = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    CAPTURE(names[i]);
    CAPTURE(results[i].feedback);
    if (names[i].find("(shipped)") != std::string::npos) {
      CHECK(results[i].verdict == env::Verdict::correct);
    } else {
      CHECK(results[i].verdict != env::Verdict::correct);
      CHECK(results[i].verdict != env::Verdict::timeout);
      wrong_output += results[i].verdict == env::Verdict::wrong_output;
    }
  }
  CHECK(wrong_output >= 3);
}
