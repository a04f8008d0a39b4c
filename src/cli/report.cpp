// `leap report`: ablation tables and plots from the SQLite store.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"

namespace leap::cli {

Handler add_report(CLI::App& app, const GlobalOptions& g) {
  auto* cmd = app.add_subcommand("report", "Print ablation tables (and write plots) from the store's runs");
  struct Opts {
    std::string runs, format = "table", out;
    double target = 0;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--runs", o->runs, "comma-separated run ids (default: all)");
  cmd->add_option("--format", o->format, "table, md, csv or html")
      ->check(CLI::IsMember({"table", "md", "csv", "html"}))->capture_default_str();
  cmd->add_option("--out", o->out, "folder for plots (SVG) and the HTML report");
  cmd->add_option("--target", o->target, "report wall time to reach this eval Acc@1 (0..1)")->check(CLI::Range(0.0, 1.0));
  return [o, &g]() -> int { not_built("leap report", "KernelBench import, leap eval --bench, and leap report"); };
}

}  // namespace leap::cli
