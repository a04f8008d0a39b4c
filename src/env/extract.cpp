#include "env/extract.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <stdexcept>
#include <optional>
#include <vector>

#include "env/errors.hpp"

namespace leap::env {

std::string_view to_string(CodeLanguage lang) { return lang == CodeLanguage::cuda ? "cuda" : "cpp"; }

namespace {

enum class Tag { cuda, cpp, yaml, other };

Tag classify(std::string tag) {
  std::transform(tag.begin(), tag.end(), tag.begin(), [](unsigned char c) { return std::tolower(c); });
  if (tag == "cuda" || tag == "cu") return Tag::cuda;
  if (tag == "cpp" || tag == "c++" || tag == "cxx") return Tag::cpp;
  if (tag == "yaml" || tag == "yml") return Tag::yaml;
  return Tag::other;
}

struct Block {
  Tag tag;
  std::string raw_tag;
  std::string body;
  int open_line;   // 1-based line of the opening fence
  bool closed;
};

std::string_view trim_right(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits into lines, keeping the answer's line numbering.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
  return lines;
}

// Number of leading backticks after at most 3 spaces of indentation; 0 if not a fence.
size_t fence_len(std::string_view line, size_t& after) {
  size_t i = 0;
  while (i < line.size() && i < 3 && line[i] == ' ') ++i;
  size_t n = 0;
  while (i + n < line.size() && line[i + n] == '`') ++n;
  after = i + n;
  return n >= 3 ? n : 0;
}

std::vector<Block> find_blocks(std::string_view text, int line_offset) {
  std::vector<Block> blocks;
  auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    size_t after = 0;
    size_t n = fence_len(lines[i], after);
    if (!n) continue;
    std::string_view info = lines[i].substr(after);
    size_t b = 0;
    while (b < info.size() && std::isspace(static_cast<unsigned char>(info[b]))) ++b;
    size_t e = b;
    while (e < info.size() && !std::isspace(static_cast<unsigned char>(info[e])) && info[e] != '`') ++e;
    Block blk{classify(std::string(info.substr(b, e - b))), std::string(info.substr(b, e - b)), "",
              static_cast<int>(i) + 1 + line_offset, false};
    size_t j = i + 1;
    for (; j < lines.size(); ++j) {
      size_t a2 = 0;
      size_t n2 = fence_len(lines[j], a2);
      if (n2 >= n && trim_right(lines[j].substr(a2)).empty()) {
        blk.closed = true;
        break;
      }
      blk.body.append(lines[j]);
      blk.body.push_back('\n');
    }
    blocks.push_back(std::move(blk));
    i = j;  // continue after the closing fence (or at the end)
  }
  return blocks;
}

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
}

}  // namespace

ExtractedAnswer extract_answer(std::string_view response, CodeLanguage expected) {
  if (response.size() > kMaxAnswerBytes)
    throw FormatError("the answer is " + std::to_string(response.size()) + " bytes; the limit is " +
                      std::to_string(kMaxAnswerBytes) + " bytes");
  int line_offset = 0;
  size_t close = response.rfind("</think>");
  if (close != std::string_view::npos) {
    std::string_view before = response.substr(0, close);
    line_offset = static_cast<int>(std::count(before.begin(), before.end(), '\n'));
    response = response.substr(close + 8);  // its first line keeps the number of the tag's line
  } else if (response.find("<think>") != std::string_view::npos) {
    throw FormatError(
        "the reasoning block <think> is never closed with </think>, so the answer has no code "
        "block and no launch plan (the answer was probably cut off: write less reasoning)");
  }

  auto blocks = find_blocks(response, line_offset);
  for (const auto& b : blocks) {
    if (!b.closed && b.tag != Tag::other)
      throw FormatError("the ```" + b.raw_tag + " block opened at line " + std::to_string(b.open_line) +
                        " is never closed with ```");
  }
  const Block* code = nullptr;
  const Block* plan = nullptr;
  for (const auto& b : blocks) {
    if (b.tag == Tag::cuda || b.tag == Tag::cpp) code = &b;
    if (b.tag == Tag::yaml) plan = &b;
  }
  const std::string want = std::string(to_string(expected));
  if (!code)
    throw FormatError("no ```" + want + " code block found: put the " +
                      (expected == CodeLanguage::cuda ? "CUDA kernels" : "C++ functions") +
                      " in one ```" + want + " block");
  CodeLanguage lang = code->tag == Tag::cuda ? CodeLanguage::cuda : CodeLanguage::cpp;
  if (lang != expected)
    throw FormatError("the code block at line " + std::to_string(code->open_line) + " is ```" +
                      code->raw_tag + " but this environment runs " + want +
                      " solutions: write one ```" + want + " block");
  if (blank(code->body))
    throw FormatError("the ```" + code->raw_tag + " block at line " + std::to_string(code->open_line) +
                      " is empty");
  if (code->body.size() > kMaxCodeBytes)
    throw FormatError("the ```" + code->raw_tag + " block at line " + std::to_string(code->open_line) +
                      " is " + std::to_string(code->body.size()) + " bytes; the limit is " +
                      std::to_string(kMaxCodeBytes) + " bytes");
  if (!plan)
    throw FormatError("no ```yaml launch plan block found: add a ```yaml block with `launches:`");
  if (blank(plan->body))
    throw FormatError("the ```yaml launch plan at line " + std::to_string(plan->open_line) + " is empty");
  ExtractedAnswer out;
  out.language = lang;
  out.code = code->body;
  out.code_line = code->open_line + 1;
  out.plan_yaml = plan->body;
  out.plan_line = plan->open_line + 1;
  return out;
}

std::string read_answer_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string text(kMaxAnswerBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw std::runtime_error("cannot read " + path);
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

}  // namespace leap::env
