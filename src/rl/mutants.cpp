// One-edit mutants of a solution's code block (train.sft.mutants).
#include "rl/mutants.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <string_view>

namespace leap::rl {

namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// Marks the characters of `line` that must not be edited: loop headers, subscripts, comments.
std::vector<bool> protected_mask(const std::string& line) {
  std::vector<bool> keep(line.size(), false);
  auto protect_parens = [&](size_t open) {  // from '(' to its matching ')'
    int depth = 0;
    for (size_t k = open; k < line.size(); ++k) {
      keep[k] = true;
      if (line[k] == '(') ++depth;
      if (line[k] == ')' && --depth == 0) return;
    }
  };
  for (const char* kw : {"for", "while"}) {
    const std::string_view w(kw);
    for (size_t p = line.find(w); p != std::string::npos; p = line.find(w, p + 1)) {
      if ((p > 0 && ident_char(line[p - 1])) || (p + w.size() < line.size() && ident_char(line[p + w.size()])))
        continue;
      const size_t open = line.find('(', p + w.size());
      if (open != std::string::npos) protect_parens(open);
    }
  }
  int bracket = 0;
  for (size_t k = 0; k < line.size(); ++k) {
    if (line[k] == '[') ++bracket;
    if (bracket > 0) keep[k] = true;
    if (line[k] == ']' && bracket > 0) --bracket;
  }
  const size_t comment = line.find("//");
  if (comment != std::string::npos)
    for (size_t k = comment; k < line.size(); ++k) keep[k] = true;
  return keep;
}

bool free_span(const std::vector<bool>& keep, size_t pos, size_t n) {
  for (size_t k = pos; k < pos + n; ++k)
    if (k >= keep.size() || keep[k]) return false;
  return true;
}

/// Shortest text of `v` as a C++ float literal in the style of `like` (keeps an `f` suffix).
std::string float_literal(double v, bool f_suffix) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return f_suffix ? s + "f" : s;
}

/// Kind of an operator edit from its `from` text (" += ", " < ", ...).
const char* operator_kind(std::string_view from) {
  if (from.size() == 4) return from[2] == '=' && (from[1] == '<' || from[1] == '>') ? "comparison" : "compound";
  return from[1] == '<' || from[1] == '>' ? "comparison" : "arithmetic";
}

/// One editable place of a code line: `from` at column `col` becomes `to`.
struct Site {
  size_t col;
  std::string from, to;
  const char* kind;
};

/// Every editable place of one code line, in column order (nothing for comments, preprocessor
/// lines, `extern` declarations and blank lines).
std::vector<Site> line_sites(const std::string& line) {
  std::vector<Site> sites;
  const size_t first = line.find_first_not_of(" \t");
  if (first == std::string::npos) return sites;
  const std::string_view body(line.c_str() + first);
  if (body.rfind("//", 0) == 0 || body.rfind("#", 0) == 0 || body.rfind("extern", 0) == 0 || body.rfind("/*", 0) == 0 ||
      body.rfind("*", 0) == 0)
    return sites;
  const auto keep = protected_mask(line);

  // Operators written with a space on each side (so `x[i+1]`, `++i`, `float* p` are not matched).
  static const std::pair<const char*, const char*> ops[] = {
      {" += ", " -= "}, {" -= ", " += "}, {" *= ", " /= "}, {" /= ", " *= "}, {" <= ", " >= "}, {" >= ", " <= "},
      {" + ", " - "},   {" - ", " + "},   {" * ", " / "},   {" / ", " * "},   {" < ", " > "},   {" > ", " < "}};
  for (const auto& [from, to] : ops) {
    const std::string_view f(from);
    for (size_t p = line.find(f); p != std::string::npos; p = line.find(f, p + 1))
      if (free_span(keep, p, f.size())) sites.push_back({p, std::string(from), std::string(to), operator_kind(f)});
  }
  // Math functions: `name(`, `std::name(`, `namef(`.
  static const std::map<std::string, std::string> fns = {{"tanh", "sinh"}, {"exp", "expm1"}, {"sqrt", "cbrt"},
                                                         {"log", "log1p"}, {"max", "min"},   {"min", "max"},
                                                         {"fmax", "fmin"}, {"fmin", "fmax"}};
  for (size_t p = 0; p < line.size();) {
    if (!ident_char(line[p]) || (p > 0 && ident_char(line[p - 1]))) {
      ++p;
      continue;
    }
    size_t e = p;
    while (e < line.size() && ident_char(line[e])) ++e;
    const std::string word = line.substr(p, e - p);
    if (e < line.size() && line[e] == '(' && free_span(keep, p, e - p)) {
      std::string base = word;
      bool f = false;
      if (!fns.count(base) && base.size() > 1 && base.back() == 'f' && fns.count(base.substr(0, base.size() - 1))) {
        base.pop_back();
        f = true;
      }
      if (auto it = fns.find(base); it != fns.end()) sites.push_back({p, word, it->second + (f ? "f" : ""), "function"});
    }
    // Float literals: digits '.' digits [f], not part of an identifier; zero is left alone.
    if (std::isdigit(static_cast<unsigned char>(line[p])) && free_span(keep, p, e - p)) {
      size_t q = p;
      while (q < line.size() && std::isdigit(static_cast<unsigned char>(line[q]))) ++q;
      if (q < line.size() && line[q] == '.') {
        size_t r = q + 1;
        while (r < line.size() && std::isdigit(static_cast<unsigned char>(line[r]))) ++r;
        const bool f = r < line.size() && (line[r] == 'f' || line[r] == 'F');
        const size_t end = r + (f ? 1 : 0);
        if ((end >= line.size() || !ident_char(line[end])) && free_span(keep, p, end - p)) {
          const double v = std::stod(line.substr(p, r - p));
          if (v != 0.0) sites.push_back({p, line.substr(p, end - p), float_literal(2 * v, f), "literal"});
        }
        e = std::max(e, end);
      }
    }
    p = e;
  }
  std::stable_sort(sites.begin(), sites.end(), [](const Site& a, const Site& b) { return a.col < b.col; });
  return sites;
}

/// Mutants of one code line, in column order: `text` is the edited line, `edit` the change
/// without its line number ("'>' -> '<'").
std::vector<Mutant> line_mutants(const std::string& line) {
  std::vector<Mutant> out;
  for (const auto& site : line_sites(line)) {
    std::string m = line;
    m.replace(site.col, site.from.size(), site.to);
    auto trim = [](std::string s) {
      const size_t a = s.find_first_not_of(' '), b = s.find_last_not_of(' ');
      return a == std::string::npos ? s : s.substr(a, b - a + 1);
    };
    out.push_back({m, "'" + trim(site.from) + "' -> '" + trim(site.to) + "'", site.kind});
  }
  return out;
}

/// Calls `fn(line_start, line_end, line_no)` for each line of the first ```cpp or ```cuda block of
/// `solution` (offsets into `solution`, line numbers 1-based within the block); nothing when there
/// is no such block.
template <typename Fn>
void for_each_code_line(const std::string& solution, Fn&& fn) {
  size_t open = std::string::npos;
  for (const char* fence : {"```cpp\n", "```cuda\n"}) {
    const size_t p = solution.find(fence);
    if (p != std::string::npos && (open == std::string::npos || p < open)) open = p + std::string_view(fence).size();
  }
  if (open == std::string::npos) return;
  const size_t close = solution.find("\n```", open - 1);
  if (close == std::string::npos || close < open) return;
  size_t line_start = open;
  for (int line_no = 1; line_start <= close; ++line_no) {
    size_t line_end = solution.find('\n', line_start);
    if (line_end == std::string::npos || line_end > close) line_end = close;
    fn(line_start, line_end, line_no);
    line_start = line_end + 1;
  }
}

}  // namespace

std::vector<Mutant> solution_mutants(const std::string& solution) {
  std::vector<Mutant> out;
  for_each_code_line(solution, [&](size_t line_start, size_t line_end, int line_no) {
    const std::string line = solution.substr(line_start, line_end - line_start);
    for (auto& m : line_mutants(line)) {
      m.text = solution.substr(0, line_start) + m.text + solution.substr(line_end);
      m.edit = fmt::format("line {}: {}", line_no, m.edit);
      out.push_back(std::move(m));
    }
  });
  return out;
}

std::string systematic_twin(const std::string& solution, const std::vector<std::string>& kinds) {
  std::string out;
  size_t copied = 0;  // solution[0, copied) is in `out`
  for_each_code_line(solution, [&](size_t line_start, size_t line_end, int) {
    std::string line = solution.substr(line_start, line_end - line_start);
    const auto sites = line_sites(line);
    size_t right = line.size();  // sites are applied right to left; one that would overlap the last applied is skipped
    for (auto it = sites.rbegin(); it != sites.rend(); ++it) {
      if (std::find(kinds.begin(), kinds.end(), it->kind) == kinds.end() || it->col + it->from.size() > right) continue;
      line.replace(it->col, it->from.size(), it->to);
      right = it->col;
    }
    out += solution.substr(copied, line_start - copied);
    out += line;
    copied = line_end;
  });
  out += solution.substr(copied);
  return out;
}

}  // namespace leap::rl
