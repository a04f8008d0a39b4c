// `leap report`: ablation tables and plots from the SQLite store.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "report/ablation.hpp"
#include "report/plots.hpp"
#include "report/runs.hpp"
#include "report/table.hpp"
#include "store/store.hpp"
#include "util/error.hpp"

namespace leap::cli {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> split_ids(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string id;
  while (std::getline(in, id, ','))
    if (!id.empty()) out.push_back(id);
  return out;
}

std::string label(const report::RunSummary& r) { return r.run.name + " " + r.run.id; }

/// The plots of DESIGN.md section 5: reward, Acc@1 and Acc@T against step and wall time, DCP activation.
std::vector<report::PlotSpec> plot_specs(store::Store& st, const std::vector<report::RunSummary>& runs) {
  int64_t T = 1;
  for (const auto& r : runs) T = std::max(T, r.turns);
  const std::string accT = "eval/acc@" + std::to_string(T);
  struct Curve {
    std::string stem, title, ylabel;
    std::vector<std::string> names;
  };
  const std::vector<Curve> curves = {
      {"reward", "mean reward", "reward_mean", {"reward_mean"}},
      {"acc1", "Acc@1 (eval; train if no eval)", "Acc@1", {"eval/acc@1", "train_acc@1"}},
      {"accT", "Acc@" + std::to_string(T) + " (eval; train Acc@T if no eval)", "Acc@T", {accT, "train_acc@T"}},
  };
  std::vector<report::PlotSpec> plots;
  for (const auto& c : curves) {
    report::PlotSpec by_step{c.stem + "_vs_step.svg", c.title + " per step", "step", c.ylabel, {}};
    report::PlotSpec by_time{c.stem + "_vs_time.svg", c.title + " against wall time", "wall time (minutes)", c.ylabel, {}};
    for (const auto& r : runs) {
      report::Series s{label(r), {}, {}}, w{label(r), {}, {}};
      for (const auto& p : report::first_series(st, r.run.id, c.names)) {
        s.x.push_back(static_cast<double>(p.step));
        s.y.push_back(p.value);
        w.x.push_back((p.wall_time - r.run.started_at) / 60.0);
        w.y.push_back(p.value);
      }
      by_step.lines.push_back(s);
      by_time.lines.push_back(w);
    }
    plots.push_back(by_step);
    plots.push_back(by_time);
  }
  report::PlotSpec dcp{"dcp_activation.svg", "DCP: share of groups expanded to debugging turns", "step",
                       "activated groups (fraction)", {}};
  for (const auto& r : runs) {
    report::Series s{label(r), {}, {}};
    store::Statement q = st.db().prepare(
        "SELECT step, avg(dcp_activated) FROM groups WHERE run_id = ?1 GROUP BY step ORDER BY step");
    q.bind_text(1, r.run.id);
    while (q.step()) s.x.push_back(static_cast<double>(q.column_int64(0))), s.y.push_back(q.column_double(1));
    if (s.x.empty())
      for (const auto& p : report::first_series(st, r.run.id, {"activated_groups_frac"}))
        s.x.push_back(static_cast<double>(p.step)), s.y.push_back(p.value);
    dcp.lines.push_back(s);
  }
  plots.push_back(dcp);
  return plots;
}

/// An SVG file's content without the XML declaration and DOCTYPE, for inlining in HTML.
std::string inline_svg(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream s;
  s << in.rdbuf();
  std::string t = s.str();
  size_t at = t.find("<svg");
  return at == std::string::npos ? t : t.substr(at);
}

std::string html_document(const std::string& db, const report::Table& ablation,
                          const std::vector<report::Table>& curves, const std::vector<std::string>& svgs,
                          const std::string& plot_note) {
  std::string h =
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n<title>leap report</title>\n"
      "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}"
      "th,td{border:1px solid #bbb;padding:3px 8px;text-align:right}th:first-child,td:first-child{text-align:left}"
      "th{background:#eee}figure{display:inline-block;margin:0 1em 1em 0}</style>\n</head>\n<body>\n";
  h += "<h1>leap report</h1>\n<p>store: " + report::html_escape(db) + "</p>\n";
  h += report::render_html(ablation);
  h += "<h2>Plots</h2>\n";
  if (!plot_note.empty()) h += "<p>" + report::html_escape(plot_note) + "</p>\n";
  for (const auto& f : svgs)
    h += "<figure>\n" + inline_svg(f) + "\n<figcaption>" + report::html_escape(fs::path(f).filename().string()) +
         "</figcaption>\n</figure>\n";
  for (const auto& c : curves) h += report::render_html(c);
  return h + "</body>\n</html>\n";
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw Error("leap report: cannot write " + p.string());
}

int run_report(const std::string& db, const std::string& runs_arg, const std::string& format, std::string out_dir,
               double target, const std::string& results_dir) {
  if (!runs_arg.empty() && split_ids(runs_arg).empty())
    throw UsageError("leap report --runs '" + runs_arg + "': no run id in it");
  if (!fs::exists(db)) throw UsageError("leap report: no store at " + db + " (give --db PATH)");
  store::OpenOptions oo;
  oo.read_only = true;  // works while a run is writing (WAL): we see its last committed step
  store::Store st(db, oo);
  std::vector<std::string> ids = split_ids(runs_arg);
  if (ids.empty()) {
    auto all = st.list_runs();
    std::reverse(all.begin(), all.end());  // oldest first
    for (const auto& r : all)
      if (r.kind == store::RunKind::train) ids.push_back(r.id);
    if (ids.empty())
      for (const auto& r : all) ids.push_back(r.id);
  }
  if (ids.empty()) throw UsageError("leap report: the store " + db + " holds no runs");
  std::vector<report::RunSummary> runs;
  for (const auto& id : ids) {
    if (!st.get_run(id)) throw UsageError("leap report: no run '" + id + "' in " + db);
    runs.push_back(report::summarize_run(st, id, target));
  }
  report::Table ablation = report::ablation_table(runs, target);
  std::vector<report::Table> curves;
  for (const auto& r : runs) curves.push_back(report::curve_table(r.run.id, report::summarize_curves(st, r.run.id)));

  if (format == "html" && out_dir.empty()) out_dir = (fs::path(results_dir) / "report").string();
  std::vector<std::string> svgs;
  std::string plot_note;
  if (!out_dir.empty()) {
    fs::create_directories(fs::path(out_dir) / "plots");
    if (report::gnuplot_available()) {
      svgs = report::write_plots((fs::path(out_dir) / "plots").string(), plot_specs(st, runs));
      if (svgs.empty()) plot_note = "No curves to plot yet (the runs have no metric points).";
    } else {
      plot_note = "No plots: gnuplot is not installed (Debian: apt-get install gnuplot-nox; scripts/setup.sh does it).";
      spdlog::warn("leap report: {}", plot_note);
    }
  }
  std::string text;
  if (format == "table") {
    text = report::render_text(ablation);
    for (const auto& c : curves) text += "\n" + report::render_text(c);
  } else if (format == "md") {
    text = report::render_markdown(ablation);
    for (const auto& c : curves) text += "\n" + report::render_markdown(c);
  } else if (format == "csv") {
    text = report::render_csv(ablation);
  } else {
    text = html_document(db, ablation, curves, svgs, plot_note);
  }
  if (!out_dir.empty()) {
    const std::string ext = format == "table" ? "txt" : format;
    fs::path file = fs::path(out_dir) / ("report." + ext);
    write_file(file, text);
    if (format == "csv") {
      report::Table all;
      all.header = {"run"};
      for (const auto& c : curves) {
        if (all.header.size() == 1) all.header.insert(all.header.end(), c.header.begin(), c.header.end());
        std::string run = c.title.substr(4, c.title.find(':') - 4);
        for (const auto& row : c.rows) {
          std::vector<std::string> r = {run};
          r.insert(r.end(), row.begin(), row.end());
          all.rows.push_back(r);
        }
      }
      if (all.header.size() == 1) all.header = {"run", "metric", "points", "first", "last", "min", "max", "last_10%_mean"};
      write_file(fs::path(out_dir) / "curves.csv", report::render_csv(all));
    }
    if (format == "html") {
      std::printf("wrote %s (%zu plots)\n", file.string().c_str(), svgs.size());
      return 0;
    }
    spdlog::info("leap report: wrote {} and {} plots under {}", file.string(), svgs.size(), out_dir);
  }
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

Handler add_report(CLI::App& app, const GlobalOptions& g) {
  auto* cmd = app.add_subcommand("report", "Print ablation tables (and write plots) from the store's runs");
  struct Opts {
    std::string runs, format = "table", out;
    double target = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--runs", o->runs, "comma-separated run ids (default: all training runs)");
  cmd->add_option("--format", o->format, "table, md, csv or html")
      ->check(CLI::IsMember({"table", "md", "csv", "html"}))->capture_default_str();
  cmd->add_option("--out", o->out, "folder for plots (SVG) and the report file (html default: <results-dir>/report)");
  cmd->add_option("--target", o->target, "report wall time to reach this eval Acc@1 (0..1)")->check(CLI::Range(0.0, 1.0));
  return [o, &g]() -> int { return run_report(g.db, o->runs, o->format, o->out, o->target, g.results_dir); };
}

}  // namespace leap::cli
