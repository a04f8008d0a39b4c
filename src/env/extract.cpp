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

/// A fence line: three or more backticks or tildes after any indentation (spaces or tabs: a
/// fence indented inside a list item is one, as a reader sees it).
struct Fence {
  char ch = '`';
  size_t n = 0;       ///< fence characters
  size_t indent = 0;  ///< characters before them
  size_t after = 0;   ///< index just past them
};

std::optional<Fence> fence_of(std::string_view line) {
  size_t i = 0;
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  if (i >= line.size() || (line[i] != '`' && line[i] != '~')) return std::nullopt;
  const char ch = line[i];
  size_t n = 0;
  while (i + n < line.size() && line[i + n] == ch) ++n;
  if (n < 3) return std::nullopt;
  return Fence{ch, n, i, i + n};
}

/// Whether `line` closes a block opened by `open`: the same character, at least as many, nothing after.
bool closes(std::string_view line, const Fence& open) {
  const auto f = fence_of(line);
  return f && f->ch == open.ch && f->n >= open.n && trim_right(line.substr(f->after)).empty();
}

/// `line` without up to `indent` leading spaces (a block indented in a list item keeps its own
/// relative indentation).
std::string_view dedent(std::string_view line, size_t indent) {
  size_t i = 0;
  while (i < indent && i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  return line.substr(i);
}

/// `text` with every HTML comment outside a fenced block blanked (spaces; newlines kept, so line
/// numbers hold): a block inside `<!-- -->` is hidden from a reader of the rendered answer, so it
/// is not graded either (a red team's hidden block ran while the visible one was reviewed).
std::string hide_html_comments(std::string_view text) {
  std::string out(text);
  size_t pos = 0;
  bool in_comment = false;
  std::optional<Fence> fence;
  while (pos <= out.size()) {
    size_t nl = out.find('\n', pos);
    const size_t end = nl == std::string::npos ? out.size() : nl;
    std::string_view line(out.data() + pos, end - pos);
    if (!in_comment && fence) {
      if (closes(line, *fence)) fence.reset();
    } else if (!in_comment && fence_of(line)) {
      fence = fence_of(line);
    } else {
      size_t i = pos;
      while (i < end) {
        if (!in_comment) {
          const size_t open = out.find("<!--", i);
          if (open == std::string::npos || open >= end) break;
          in_comment = true;
          i = open;
        }
        const size_t close = out.find("-->", i + (out.compare(i, 4, "<!--") == 0 ? 4 : 0));
        const size_t stop = close == std::string::npos || close >= end ? end : close + 3;
        for (size_t k = i; k < stop; ++k) out[k] = ' ';
        if (stop == end && (close == std::string::npos || close >= end)) break;
        in_comment = false;
        i = stop;
      }
    }
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return out;
}

/// Where the reasoning ends: just past its `</think>`, or 0 when there is none. A response that
/// begins with `<think>` ends it at the first `</think>` (FormatError when there is none); one
/// that does not (a chat template that opens the block in the prompt) at the first `</think>`
/// outside a fenced block. `<think>` or `</think>` anywhere else is text: prose that mentions the
/// tag, or a code comment, is part of the answer.
size_t reasoning_end(std::string_view text) {
  size_t lead = 0;
  while (lead < text.size() && std::isspace(static_cast<unsigned char>(text[lead]))) ++lead;
  if (text.substr(lead, 7) == "<think>") {
    const size_t close = text.find("</think>", lead + 7);
    if (close == std::string_view::npos)
      throw FormatError(
          "the reasoning block <think> is never closed with </think>, so the answer has no code "
          "block and no launch plan (the answer was probably cut off: write less reasoning)");
    return close + 8;
  }
  std::optional<Fence> fence;
  size_t pos = 0;
  for (std::string_view line : split_lines(text)) {
    if (fence) {
      if (closes(line, *fence)) fence.reset();
    } else if (fence_of(line)) {
      fence = fence_of(line);
    } else if (const size_t at = line.find("</think>"); at != std::string_view::npos) {
      return pos + at + 8;
    }
    pos += line.size() + 1;
  }
  return 0;
}

std::vector<Block> find_blocks(std::string_view text, int line_offset) {
  std::vector<Block> blocks;
  auto lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto open = fence_of(lines[i]);
    if (!open) continue;
    std::string_view info = lines[i].substr(open->after);
    size_t b = 0;
    while (b < info.size() && std::isspace(static_cast<unsigned char>(info[b]))) ++b;
    size_t e = b;
    while (e < info.size() && !std::isspace(static_cast<unsigned char>(info[e])) && info[e] != '`' && info[e] != '~') ++e;
    Block blk{classify(std::string(info.substr(b, e - b))), std::string(info.substr(b, e - b)), "",
              static_cast<int>(i) + 1 + line_offset, false};
    size_t j = i + 1;
    for (; j < lines.size(); ++j) {
      if (closes(lines[j], *open)) {
        blk.closed = true;
        break;
      }
      blk.body.append(dedent(lines[j], open->indent));
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
  if (const size_t end = reasoning_end(response); end > 0) {
    std::string_view before = response.substr(0, end);
    line_offset = static_cast<int>(std::count(before.begin(), before.end(), '\n'));
    response = response.substr(end);  // its first line keeps the number of the tag's line
  }
  const std::string visible = hide_html_comments(response);
  auto blocks = find_blocks(visible, line_offset);
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
