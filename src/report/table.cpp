#include "report/table.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace leap::report {

std::string fmt_num(double v, int digits) {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  std::string s = b;
  // A negative value that rounds to zero prints as 0, not -0.000.
  if (s[0] == '-' && s.find_first_not_of("-0.") == std::string::npos) s.erase(0, 1);
  return s;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&#39;"; break;
      default: o += c;
    }
  }
  return o;
}

namespace {

/// Characters (UTF-8 code points) of `s`: "±" is one column, two bytes.
size_t columns(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

std::string render_text(const Table& t) {
  std::vector<size_t> w(t.header.size(), 0);
  for (size_t i = 0; i < t.header.size(); ++i) w[i] = columns(t.header[i]);
  for (const auto& r : t.rows)
    for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], columns(r[i]));
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t i = 0; i < w.size(); ++i) {
      std::string c = i < cells.size() ? cells[i] : "";
      s += (i ? "  " : "") + c + std::string(w[i] - columns(c), ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = t.title.empty() ? "" : t.title + "\n";
  out += line(t.header);
  std::string rule;
  for (size_t i = 0; i < w.size(); ++i) rule += (i ? "  " : "") + std::string(w[i], '-');
  out += rule + "\n";
  for (const auto& r : t.rows) out += line(r);
  return out;
}

std::string render_markdown(const Table& t) {
  auto cell = [](std::string s) {
    std::string o;
    for (char c : s) o += c == '|' ? std::string("\\|") : std::string(1, c);
    return o;
  };
  std::string out = t.title.empty() ? "" : "### " + t.title + "\n\n";
  out += "|";
  for (const auto& h : t.header) out += " " + cell(h) + " |";
  out += "\n|";
  for (size_t i = 0; i < t.header.size(); ++i) out += i == 0 ? " --- |" : " ---: |";
  out += "\n";
  for (const auto& r : t.rows) {
    out += "|";
    for (const auto& c : r) out += " " + cell(c) + " |";
    out += "\n";
  }
  return out;
}

std::string render_csv(const Table& t) {
  auto cell = [](const std::string& s) {
    if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
    std::string o = "\"";
    for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
    return o + "\"";
  };
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t i = 0; i < cells.size(); ++i) s += (i ? "," : "") + cell(cells[i]);
    return s + "\n";
  };
  std::string out = line(t.header);
  for (const auto& r : t.rows) out += line(r);
  return out;
}

std::string render_html(const Table& t) {
  std::string out = t.title.empty() ? "" : "<h2>" + html_escape(t.title) + "</h2>\n";
  out += t.wrap ? "<table class=\"wrap\">\n<thead><tr>" : "<table>\n<thead><tr>";
  // Headers may break after '_' and '/' (activated_groups_%); "mean ± se" stays on one line.
  auto header_cell = [](const std::string& h) {
    std::string o;
    for (char ch : h) o += html_escape(std::string(1, ch)) + (ch == '_' || ch == '/' ? "<wbr/>" : "");
    return o;
  };
  auto cell = [](const std::string& c) {
    std::string o = html_escape(c);
    for (size_t at = o.find(" \u00b1 "); at != std::string::npos; at = o.find(" \u00b1 ", at))
      o.replace(at, 4, "&nbsp;\u00b1&nbsp;");
    return o;
  };
  for (const auto& h : t.header) out += "<th>" + header_cell(h) + "</th>";
  out += "</tr></thead>\n<tbody>\n";
  for (const auto& r : t.rows) {
    out += "<tr>";
    for (const auto& c : r) out += "<td>" + cell(c) + "</td>";
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

}  // namespace leap::report
