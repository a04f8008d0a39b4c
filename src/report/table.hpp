#pragma once
// A plain table of text cells and its renderings: aligned text, Markdown, CSV, HTML.
#include <string>
#include <vector>

namespace leap::report {

/// Header + rows of already formatted cells (every row as wide as the header).
struct Table {
  std::string title;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  bool wrap = false;  ///< HTML: cells may wrap anywhere (long config values); else they keep one line
};

/// Aligned plain text (columns padded with spaces, a dashed rule under the header).
std::string render_text(const Table& t);
/// GitHub Markdown table ('|' in cells escaped).
std::string render_markdown(const Table& t);
/// RFC 4180 CSV (cells with a comma, quote or newline are quoted).
std::string render_csv(const Table& t);
/// An HTML <table> (cells escaped), with the title as a <h2>; class "wrap" when `t.wrap`.
std::string render_html(const Table& t);
/// `s` with & < > " ' escaped for HTML / XML text and attributes.
std::string html_escape(const std::string& s);
/// `v` with `digits` decimals, "-" for NaN; a negative value that rounds to zero has no sign.
std::string fmt_num(double v, int digits = 3);

}  // namespace leap::report
