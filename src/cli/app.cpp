#include "cli/app.hpp"

#include <algorithm>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <iostream>
#include <filesystem>
#include <map>

#include "cli/commands.hpp"
#include "util/error.hpp"
#include "util/log.hpp"

namespace leap::cli {

void not_built(const std::string& what, const std::string& issue) {
  throw NotBuiltError(what + ": not built yet (arrives with the issue \"" + issue + "\")");
}

namespace {

/// Edit distance of two short words (for "did you mean").
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// The message for a first word that is no command of `app` (`leap trian x.yaml` said only "A
/// subcommand is required"), or empty. Global options and their values are skipped.
std::string unknown_command(CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") return "";
    if (!a.empty() && a[0] == '-') {
      if (a == "--db" || a == "--results-dir" || a == "--log-level") ++i;  // its value follows
      continue;
    }
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), a) != names.end()) return "";
    std::string msg = "unknown command '" + a + "' (commands:";
    std::string best;
    size_t best_d = 3;
    for (const auto& n : names) {
      msg += " " + n;
      if (const size_t d = edit_distance(a, n); d < best_d) best_d = d, best = n;
    }
    msg += ")";
    if (!best.empty()) msg += "; did you mean '" + best + "'?";
    return msg;
  }
  return "";
}

}  // namespace

int run(int argc, char** argv) {
  CLI::App app{"leap: RL post-training of code models that write GPU kernels.\n"
               "GRPO-style training against a real compile-verify-profile environment, ablations,\n"
               "and every run, rollout, turn and reward in one SQLite file.",
               "leap"};
  app.require_subcommand(1);
  app.fallthrough();
  app.set_version_flag("-V,--version", std::string("leap ") + LEAP_VERSION);
  GlobalOptions g;
  CLI::Option* db_option = app.add_option("--db", g.db, "SQLite store of every run, rollout, turn and reward "
                                                       "(default: leap.db in --results-dir)");
  app.add_option("--results-dir", g.results_dir, "folder of per-run logs, checkpoints and plots")
      ->capture_default_str();
  app.add_option("--log-level", g.log_level, "trace, debug, info, warn, error or off")->capture_default_str();

  std::map<CLI::App*, Handler> handlers;
  auto reg = [&](Handler (*add)(CLI::App&, const GlobalOptions&)) {
    size_t before = app.get_subcommands({}).size();
    Handler h = add(app, g);
    handlers[app.get_subcommands({}).at(before)] = std::move(h);
  };
  reg(add_train);
  reg(add_eval);
  reg(add_report);
  reg(add_export);
  reg(add_tasks);
  reg(add_model);
  reg(add_version);

  if (const std::string unknown = unknown_command(app, argc, argv); !unknown.empty()) {
    std::cerr << "error: " << unknown << "\nRun with --help for more information.\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  // The store follows --results-dir unless given: `--results-dir /tmp/x` once wrote its runs'
  // folders there and its rows to ./results/leap.db (a tester, 2026-12-07).
  if (db_option->count() == 0) g.db = (std::filesystem::path(g.results_dir) / "leap.db").string();
  try {
    util::init_logging(g.log_level);
    for (auto* sub : app.get_subcommands()) return handlers.at(sub)();
    return 2;
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace leap::cli
