// Tests of answer-block extraction (src/env/extract.hpp) and verdict names (src/env/verdict.hpp).
#include <doctest/doctest.h>

#include "env/errors.hpp"
#include "env/extract.hpp"
#include "env/verdict.hpp"
#include "support.hpp"

#include <fstream>

using namespace leap::env;

TEST_SUITE_BEGIN("env");

namespace {
std::string format_error_of(const std::string& text, CodeLanguage lang) {
  try {
    extract_answer(text, lang);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("env: extract finds code and plan, last block wins") {
  std::string text =
      "First try:\n"
      "```cpp\n"
      "extern \"C\" void old() {}\n"
      "```\n"
      "```yaml\n"
      "launches: [{kernel: old, args: []}]\n"
      "```\n"
      "Better:\n"
      "```cpp\n"
      "extern \"C\" void add() {}\n"
      "```\n"
      "and the plan\n"
      "```yaml\n"
      "launches:\n"
      "  - {kernel: add, args: []}\n"
      "```\n";
  auto a = extract_answer(text, CodeLanguage::cpp);
  CHECK(a.language == CodeLanguage::cpp);
  CHECK(a.code == "extern \"C\" void add() {}\n");
  CHECK(a.code_line == 10);
  CHECK(a.plan_yaml == "launches:\n  - {kernel: add, args: []}\n");
  CHECK(a.plan_line == 14);
}

TEST_CASE("env: extract accepts cuda tags and skips reasoning") {
  std::string text =
      "<think>\nmaybe\n```cuda\ndraft\n```\n</think>\n"
      "```CUDA\n"
      "extern \"C\" __global__ void k(float* x) {}\n"
      "```\n"
      "```yml\n"
      "launches: [{kernel: k, grid: [1], block: [1], args: [x]}]\n"
      "```";
  auto a = extract_answer(text, CodeLanguage::cuda);
  CHECK(a.language == CodeLanguage::cuda);
  CHECK(a.code.find("__global__ void k") != std::string::npos);
  CHECK(a.code_line == 8);
  CHECK(a.plan_yaml.find("kernel: k") != std::string::npos);
}

TEST_CASE("env: extract format errors") {
  const std::string plan = "```yaml\nlaunches: []\n```\n";
  const std::string code = "```cpp\nint f();\n```\n";
  CHECK(format_error_of(plan, CodeLanguage::cpp).find("no ```cpp code block") != std::string::npos);
  CHECK(format_error_of(code, CodeLanguage::cpp).find("no ```yaml launch plan") != std::string::npos);
  // Wrong language for the backend.
  std::string e = format_error_of(code + plan, CodeLanguage::cuda);
  CHECK(e.find("line 1") != std::string::npos);
  CHECK(e.find("runs cuda solutions") != std::string::npos);
  // The last code block decides, even if an earlier one had the right language.
  e = format_error_of("```cuda\nx\n```\n" + code + plan, CodeLanguage::cuda);
  CHECK(e.find("is ```cpp") != std::string::npos);
  // Unclosed fences.
  e = format_error_of(plan + "```cpp\nint f();\n", CodeLanguage::cpp);
  CHECK(e.find("```cpp block opened at line 4 is never closed") != std::string::npos);
  e = format_error_of(code + "```yaml\nlaunches: []\n", CodeLanguage::cpp);
  CHECK(e.find("```yaml block opened at line 4 is never closed") != std::string::npos);
  // Empty blocks.
  CHECK(format_error_of("```cpp\n\n```\n" + plan, CodeLanguage::cpp).find("is empty") != std::string::npos);
  CHECK(format_error_of(code + "```yaml\n  \n```\n", CodeLanguage::cpp).find("is empty") != std::string::npos);
  // Reasoning that never ends.
  CHECK(format_error_of("<think>\n" + code + plan, CodeLanguage::cpp).find("never closed with </think>") !=
        std::string::npos);
  // An unclosed fence of another language (prose) is ignored only when it is not code.
  auto a = extract_answer(code + plan + "```text\nloose", CodeLanguage::cpp);
  CHECK(a.code == "int f();\n");
}

TEST_CASE("env: extract reads what a reader of the rendered answer sees") {
  // A red team's honest answers were format errors and a hidden block was graded (2026-12-08).
  const std::string code = "```cpp\nint f();\n```\n";
  const std::string plan = "```yaml\nlaunches: []\n```\n";
  // Prose that mentions the tag is no reasoning block.
  auto a = extract_answer("I skip the <think> step here.\n" + code + plan, CodeLanguage::cpp);
  CHECK(a.code == "int f();\n");
  // "</think>" inside the code (a comment) does not cut the answer.
  a = extract_answer("Here:\n```cpp\n// no </think> here\nint g();\n```\n" + plan, CodeLanguage::cpp);
  CHECK(a.code == "// no </think> here\nint g();\n");
  CHECK(a.code_line == 3);
  // A template that opened the block in the prompt: the response starts inside the reasoning.
  a = extract_answer("draft:\n```cpp\nint old();\n```\nok.</think>\n" + code + plan, CodeLanguage::cpp);
  CHECK(a.code == "int f();\n");
  CHECK(a.code_line == 7);
  // Leading whitespace before <think>; the first </think> ends it.
  a = extract_answer("\n <think>\n```cpp\nint old();\n```\n</think>\n" + code + plan, CodeLanguage::cpp);
  CHECK(a.code == "int f();\n");
  // Tilde fences (CommonMark), and fences indented inside a list item.
  a = extract_answer("~~~cpp\nint t();\n~~~\n~~~~yaml\nlaunches: [t]\n~~~~\n", CodeLanguage::cpp);
  CHECK(a.code == "int t();\n");
  CHECK(a.plan_yaml == "launches: [t]\n");
  a = extract_answer("1. The code:\n\n    ```cpp\n    int h() {\n      return 1;\n    }\n    ```\n2. The plan:\n\n"
                     "    ```yaml\n    launches:\n      - {kernel: h}\n    ```\n",
                     CodeLanguage::cpp);
  CHECK(a.code == "int h() {\n  return 1;\n}\n");
  CHECK(a.plan_yaml == "launches:\n  - {kernel: h}\n");
  // A ~~~ block is not closed by ``` (nor the reverse).
  a = extract_answer("~~~cpp\nint u();\n```\nint v();\n~~~\n" + plan, CodeLanguage::cpp);
  CHECK(a.code == "int u();\n```\nint v();\n");
  // A block inside an HTML comment is hidden from a reader, and not graded.
  a = extract_answer(code + plan + "<!--\n```cpp\nint hidden();\n```\n-->\n", CodeLanguage::cpp);
  CHECK(a.code == "int f();\n");
  a = extract_answer(code + "<!-- x --> text <!-- ```cpp -->\n" + plan, CodeLanguage::cpp);
  CHECK(a.code == "int f();\n");
  CHECK(format_error_of("<!--\n" + code + plan, CodeLanguage::cpp).find("no ```cpp code block") != std::string::npos);
  // "<!--" inside a code block is code, not a comment.
  a = extract_answer("```cpp\nconst char* s = \"<!--\";\n```\n" + plan, CodeLanguage::cpp);
  CHECK(a.code == "const char* s = \"<!--\";\n");
}

TEST_CASE("env: an answer file is read to one byte past the limit, and that is refused by name") {
  leap::test::TempDir dir;
  const std::string code = "```cpp\nint f();\n```\n```yaml\nlaunches: []\n```\n";
  const std::string small = (dir.path / "small.md").string();
  std::ofstream(small, std::ios::binary) << code;
  CHECK(read_answer_file(small) == code);
  // 3 MiB of prose before the blocks: only kMaxAnswerBytes + 1 bytes come back.
  const std::string big = (dir.path / "big.md").string();
  {
    std::ofstream out(big, std::ios::binary);
    out << std::string(3 * 1024 * 1024, 'x') << "\n" << code;
  }
  const std::string text = read_answer_file(big);
  CHECK(text.size() == kMaxAnswerBytes + 1);
  CHECK(format_error_of(text, CodeLanguage::cpp).find(std::to_string(kMaxAnswerBytes) + " bytes") != std::string::npos);
  CHECK_THROWS_WITH_AS(read_answer_file((dir.path / "none.md").string()), doctest::Contains("none.md"),
                       std::runtime_error);
}

TEST_CASE("env: verdict names round-trip and feedback is bounded") {
  for (int i = 0; i <= static_cast<int>(Verdict::infra_error); ++i) {
    auto v = static_cast<Verdict>(i);
    CHECK(verdict_from_string(to_string(v)) == v);
  }
  CHECK(to_string(Verdict::inputs_modified) == "inputs_modified");
  CHECK_THROWS_AS(verdict_from_string("great"), leap::Error);
  std::string big(10000, 'x');
  auto r = EvalResult::make(Verdict::compile_error, big, 500);
  CHECK(r.feedback.size() <= 500);
  CHECK(r.feedback.find("more characters cut") != std::string::npos);
  CHECK(EvalResult::make(Verdict::timeout, "short", 500).feedback == "short");
  CHECK(std::isnan(r.speedup));
}

TEST_SUITE_END();
