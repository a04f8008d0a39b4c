#include "report/html_report.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/error.hpp"

namespace leap::report {

namespace {

/// An SVG file's content from its <svg> element on (no XML declaration or DOCTYPE), for inlining.
std::string inline_svg(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("leap report: cannot read the plot " + path);
  std::ostringstream s;
  s << in.rdbuf();
  std::string t = s.str();
  size_t at = t.find("<svg");
  return at == std::string::npos ? t : t.substr(at);
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
    h += "<figure id=\"" + html_escape(std::filesystem::path(p.path).stem().string()) + "\">\n" + inline_svg(p.path) +
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
