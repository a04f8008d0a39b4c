// `leap report`: ablation tables and plots from the SQLite store.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "report/ablation.hpp"
#include "report/html_report.hpp"
#include "report/plots.hpp"
#include "report/report_plots.hpp"
#include "report/runs.hpp"
#include "report/table.hpp"
#include "store/store.hpp"
#include "util/error.hpp"

namespace leap::cli {

namespace {

namespace fs = std::filesystem;

/// The ids of a comma-separated list, trimmed, each once (a repeated id is not a second seed).
std::vector<std::string> split_ids(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string id;
  while (std::getline(in, id, ',')) {
    const size_t a = id.find_first_not_of(" \t"), b = id.find_last_not_of(" \t");
    if (a == std::string::npos) continue;
    id = id.substr(a, b - a + 1);
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  }
  return out;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
  if (!out) throw Error("leap report: cannot write " + p.string() + ": " + std::strerror(errno));
}

int run_report(const std::string& db, const std::string& runs_arg, const std::string& format, std::string out_dir,
               double target, const std::string& results_dir, const std::string& same_arg) {
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
  if (ids.empty()) {
    // A store written only by `leap eval --solutions` holds evaluations, which are not runs.
    const int64_t evaluations = st.count_rows("evaluations");
    throw UsageError("leap report: the store " + db + " holds no runs" +
                     (evaluations > 0 ? " (it holds " + std::to_string(evaluations) +
                                            " evaluation(s) made by leap eval --solutions or --model, which are not "
                                            "runs: leap eval printed their tables; leap report compares training runs, "
                                            "with the evaluations leap eval --run adds to them)"
                                      : std::string()));
  }
  std::vector<report::RunSummary> runs;
  for (const auto& id : ids) {
    if (!st.get_run(id)) throw UsageError("leap report: no run '" + id + "' in " + db);
    runs.push_back(report::summarize_run(st, id, target));
    if (!runs.back().writer_gone.empty())
      spdlog::warn("leap report: run {} is marked running but its writer is gone ({}): it was stopped without a "
                   "chance to mark it (SIGKILL, the OOM killer); `leap train --resume {}` continues it from its last "
                   "checkpoint",
                   id, runs.back().writer_gone, id);
  }
  // --same: config keys whose values do not make separate arms (e.g. model.path of several warm
  // starts, so an arm's spread covers them).
  for (const auto& key : split_ids(same_arg)) {
    bool known = false;
    for (auto& r : runs) known = r.config.erase(key) > 0 || known;
    if (!known) throw UsageError("leap report --same: no run has the config key '" + key + "'");
  }
  report::Table ablation = report::ablation_table(runs, target);
  std::vector<report::Table> curves;
  for (const auto& r : runs) curves.push_back(report::curve_table(r.run.id, report::summarize_curves(st, r.run.id)));

  if (format == "html" && out_dir.empty()) out_dir = (fs::path(results_dir) / "report").string();
  std::vector<report::WrittenPlot> svgs;
  std::string plot_note;
  if (!out_dir.empty()) {
    // The folder and the report file checked before anything is written (a report file that is
    // a folder left the plots behind; a file given as --out gave a bare filesystem error).
    std::error_code ec;
    if (fs::exists(out_dir, ec) && !fs::is_directory(out_dir, ec))
      throw UsageError("leap report --out " + out_dir + ": a file, not a folder");
    const fs::path report_file = fs::path(out_dir) / ("report." + std::string(format == "table" ? "txt" : format));
    if (fs::is_directory(report_file, ec))
      throw UsageError("leap report --out " + out_dir + ": " + report_file.string() + " is a folder; the report file goes there");
    fs::create_directories(fs::path(out_dir) / "plots", ec);
    if (ec) throw Error("leap report --out " + out_dir + ": cannot create the folder: " + ec.message());
    if (report::gnuplot_available()) {
      svgs = report::write_plots((fs::path(out_dir) / "plots").string(), report::report_plots(st, runs));
      if (svgs.empty()) plot_note = "No curves to plot yet (the runs have no metric points).";
    } else {
      plot_note = "No plots: gnuplot is not installed (Debian: apt-get install gnuplot-nox; scripts/setup.sh does it).";
      spdlog::warn("leap report: {}", plot_note);
    }
  }
  // Text, Markdown and HTML show the ablation cut into narrow tables; CSV keeps it whole.
  const std::vector<report::Table> parts = report::split_ablation_table(ablation);
  std::string text;
  if (format == "table") {
    for (const auto& t : parts) text += (text.empty() ? "" : "\n") + report::render_text(t);
    for (const auto& c : curves) text += "\n" + report::render_text(c);
  } else if (format == "md") {
    for (const auto& t : parts) text += (text.empty() ? "" : "\n") + report::render_markdown(t);
    for (const auto& c : curves) text += "\n" + report::render_markdown(c);
  } else if (format == "csv") {
    text = report::render_csv(ablation);
  } else {
    text = report::html_report(db, parts, curves, svgs, plot_note);
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
    std::string same;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--runs", o->runs, "comma-separated run ids (default: all training runs)");
  cmd->add_option("--format", o->format, "table, md, csv or html")
      ->check(CLI::IsMember({"table", "md", "csv", "html"}))->capture_default_str();
  cmd->add_option("--out", o->out, "folder for plots (SVG) and the report file (html default: <results-dir>/report)");
  cmd->add_option("--target", o->target, "report wall time to reach this eval Acc@1 (0..1)")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--same", o->same,
                  "comma-separated config keys whose differences do not make separate arms, e.g. model.path to pool "
                  "runs from several warm starts into one arm");
  return [o, &g]() -> int { return run_report(g.db, o->runs, o->format, o->out, o->target, g.results_dir, o->same); };
}

}  // namespace leap::cli
