#include "report/html_report.hpp"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "util/error.hpp"

namespace leap::report {

namespace {

/// An SVG file's content from its <svg> element on (no XML declaration or DOCTYPE), for inlining,
/// with every id (and the references to it: href="#..", url(#..)) prefixed by `prefix`, and the
/// generator's title ("Gnuplot", a tooltip) replaced by `title`: gnuplot writes the same ids
/// (gnuplot_canvas, gpPt0..) into every plot, so a page of ten plots held each id ten times (a
/// new user's HTML check, 2026-12-08).
std::string inline_svg(const std::string& path, const std::string& prefix, const std::string& title) {
  std::ifstream in(path);
  if (!in) throw Error("leap report: cannot read the plot " + path);
  std::ostringstream s;
  s << in.rdbuf();
  std::string t = s.str();
  size_t at = t.find("<svg");
  if (at != std::string::npos) t = t.substr(at);
  static const std::regex ids(R"(\bid=(["']))");
  t = std::regex_replace(t, ids, "id=$1" + prefix + "-");
  static const std::regex refs(R"(href=(["'])#)");
  t = std::regex_replace(t, refs, "href=$1#" + prefix + "-");
  static const std::regex urls(R"(url\(#)");
  t = std::regex_replace(t, urls, "url(#" + prefix + "-");
  static const std::regex gnuplot_title("<title>Gnuplot</title>");
  return std::regex_replace(t, gnuplot_title, "<title>" + html_escape(title) + "</title>", std::regex_constants::format_first_only);
}

// Plots take the content width (at most 1200 px; gnuplot's viewBox keeps their aspect ratio);
// tables never push the page wider than the window: long cells (model paths) wrap.
constexpr const char* kStyle =
    "body{font-family:sans-serif;margin:1.5em 2em;max-width:1300px;color:#222}"
    "h2{margin-top:1.6em}"
    "table{border-collapse:collapse;margin-bottom:1.2em;max-width:100%}"
    "th,td{border:1px solid #bbb;padding:3px 8px;text-align:right}td{white-space:nowrap}"
    "td:first-child,table.wrap td{white-space:normal;overflow-wrap:anywhere}"
    "th:first-child,td:first-child{text-align:left}th{background:#eee}"
    "figure{display:block;margin:0 0 2.2em 0;max-width:1200px}"
    "figure svg{display:block;width:100%;height:auto}"
    "figcaption{font-size:0.92em;color:#444;margin-top:0.3em}"
    "details{margin-bottom:1em}summary{cursor:pointer;font-weight:bold}";

}  // namespace

std::string html_report(const std::string& store_path, const std::vector<Table>& tables,
                        const std::vector<Table>& curves, const std::vector<WrittenPlot>& plots,
                        const std::string& plot_note) {
  std::string h = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n"
                  "<title>leap report</title>\n<style>" + std::string(kStyle) + "</style>\n</head>\n<body>\n";
  h += "<h1>leap report</h1>\n<p>store: " + html_escape(store_path) + "</p>\n";
  for (const auto& t : tables) h += render_html(t);
  h += "<h2>Plots</h2>\n";
  if (!plot_note.empty()) h += "<p>" + html_escape(plot_note) + "</p>\n";
  for (const auto& p : plots) {
    const std::string name = std::filesystem::path(p.path).filename().string();
    const std::string stem = std::filesystem::path(p.path).stem().string();
    h += "<figure id=\"" + html_escape(stem) + "\">\n" + inline_svg(p.path, "svg-" + stem, name) +
         "\n<figcaption><b>" + html_escape(name) + "</b>: " + html_escape(p.caption) + "</figcaption>\n</figure>\n";
  }
  if (!curves.empty()) {
    h += "<h2>Per-run curves</h2>\n";
    for (const auto& c : curves) {
      Table body = c;
      body.title.clear();  // shown as the summary line
      h += "<details>\n<summary>" + html_escape(c.title) + "</summary>\n" + render_html(body) + "</details>\n";
    }
  }
  return h + "</body>\n</html>\n";
}

}  // namespace leap::report
