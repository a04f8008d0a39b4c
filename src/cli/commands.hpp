#pragma once
// Subcommand registration. Each src/cli/<name>.cpp defines one add_<name>() that declares the
// subcommand's flags on the CLI11 app and returns the handler `leap` runs when it is chosen.
#include <functional>
#include <string>

namespace CLI {
class App;
}

namespace leap::cli {

/// Options every subcommand sees (given before or after the subcommand name).
struct GlobalOptions {
  std::string db = "results/leap.db";  ///< SQLite store of runs, rollouts, turns, rewards (<results_dir>/leap.db unless --db)
  std::string results_dir = "results"; ///< per-run folders (logs, checkpoints, plots)
  std::string log_level = "info";      ///< trace | debug | info | warn | error | off
};

/// Runs a chosen subcommand; returns the exit status. May throw leap::Error.
using Handler = std::function<int()>;

/// `leap train CONFIG [--set k=v]... [--resume RUN_ID] [--print-config]`.
Handler add_train(CLI::App& app, const GlobalOptions& g);
/// `leap eval (--bench NAME | --tasks DIR) [--solutions DIR | --model PATH | --run ID] ...`.
Handler add_eval(CLI::App& app, const GlobalOptions& g);
/// `leap report [--runs ID,...] [--format table|md|csv|html] [--out DIR]`.
Handler add_report(CLI::App& app, const GlobalOptions& g);
/// `leap export --run ID --format jsonl [--out FILE]`: one JSON line per turn.
Handler add_export(CLI::App& app, const GlobalOptions& g);
/// `leap tasks list|show|validate|import`.
Handler add_tasks(CLI::App& app, const GlobalOptions& g);
/// `leap model inspect|tokenize|generate|init`.
Handler add_model(CLI::App& app, const GlobalOptions& g);
/// `leap version`: version, git commit, LibTorch version, CUDA and NVRTC availability.
Handler add_version(CLI::App& app, const GlobalOptions& g);

/// Throws leap::NotBuiltError (exit 3) saying that `what` arrives with the issue `issue`.
[[noreturn]] void not_built(const std::string& what, const std::string& issue);

}  // namespace leap::cli
