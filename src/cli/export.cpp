// `leap export`: a run's turns as JSON lines (the usual dataset tools), or its step and eval metrics
// as TensorBoard event files (written by tools/tensorboard_export.py).
#include <CLI/CLI.hpp>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <unistd.h>

#include "cli/commands.hpp"
#include "cli/python.hpp"
#include "store/store.hpp"
#include "util/error.hpp"

namespace leap::cli {

namespace {

namespace fs = std::filesystem;

/// The ids of a comma-separated list ("" gives none).
std::vector<std::string> split_ids(const std::string& list) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a < list.size()) {
    const size_t b = std::min(list.find(',', a), list.size());
    out.push_back(list.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

/// Writes one JSON object per turn of `run_id` to `out`; returns the number of lines.
int64_t export_jsonl(store::Store& st, const std::string& run_id, std::ostream& out) {
  // A store before schema version 4 (read as it is) holds chains: node t - 1, parent t - 2.
  const bool tree = st.db().has_column("turns", "node_index");
  const std::string node = tree ? "u.node_index, u.parent_index, u.kb_snippets"
                                 : "u.turn_index - 1, nullif(u.turn_index - 2, -1), ''";
  store::Statement q = st.db().prepare(
      "SELECT g.step, t.task_set, t.name, t.level, g.group_index, g.dcp_activated, o.rollout_index, o.reward, "
      "o.advantage, o.first_success_turn, o.reward_rank, o.reward_binary, o.reward_speedup, o.reward_kernelgym, "
      "u.turn_index, u.segment_index, u.prompt, u.completion, u.prompt_tokens, u.completion_tokens, u.verdict, "
      "u.feedback, u.speedup, u.suspicious, u.reward, u.discounted_return, u.advantage, u.compacted, " + node +
      " FROM turns u JOIN rollouts o ON o.id = u.rollout_id JOIN groups g ON g.id = o.group_id "
      "JOIN tasks t ON t.id = g.task_id WHERE g.run_id = ?1 "
      "ORDER BY g.step, g.group_index, o.rollout_index, " + (tree ? "u.node_index" : "u.turn_index"));
  q.bind_text(1, run_id);
  auto opt_num = [&](int c) { return q.column_is_null(c) ? nlohmann::json(nullptr) : nlohmann::json(q.column_double(c)); };
  auto opt_int = [&](int c) { return q.column_is_null(c) ? nlohmann::json(nullptr) : nlohmann::json(q.column_int64(c)); };
  int64_t n = 0;
  while (q.step()) {
    nlohmann::json j = {
        {"run", run_id},
        {"step", q.column_int64(0)},
        {"task_set", q.column_text(1)},
        {"task", q.column_text(2)},
        {"level", opt_int(3)},
        {"group", q.column_int64(4)},
        {"dcp_activated", q.column_int64(5) != 0},
        {"rollout", q.column_int64(6)},
        {"turn", q.column_int64(14)},
        {"node", q.column_int64(28)},
        {"parent", opt_int(29)},
        {"kb_snippets", split_ids(q.column_text(30))},
        {"segment", q.column_int64(15)},
        {"prompt", q.column_text(16)},
        {"completion", q.column_text(17)},
        {"prompt_tokens", q.column_int64(18)},
        {"completion_tokens", q.column_int64(19)},
        {"verdict", q.column_text(20)},
        {"feedback", q.column_text(21)},
        {"speedup", opt_num(22)},
        {"suspicious", q.column_int64(23) != 0},
        {"compacted", q.column_int64(27) != 0},
        {"rewards",
         {{"turn", q.column_double(24)},
          {"return", q.column_double(25)},
          {"rollout", q.column_double(7)},
          {"rank", opt_num(10)},
          {"binary", opt_num(11)},
          {"speedup", opt_num(12)},
          {"kernelgym", opt_num(13)}}},
        {"advantage", q.column_double(26)},
        {"rollout_advantage", opt_num(8)},
        {"first_success_turn", opt_int(9)},
    };
    out << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    ++n;
  }
  return n;
}

/// The TensorBoard tag of a stored metric: names with a '/' ("eval/acc@1") as they are, the
/// trainer's step metrics under "train/".
std::string tensorboard_tag(const std::string& metric) {
  return metric.find('/') == std::string::npos ? "train/" + metric : metric;
}

/// Writes run `run_id`'s metrics as TensorBoard event files under `out_dir`/<run id>/ (through the
/// project's Python, tools/tensorboard_export.py). Returns the number of scalars handed over.
/// Throws leap::Error when the tool fails (nothing is left under `out_dir`/<run id> then).
int64_t export_tensorboard(store::Store& st, const store::RunRow& run, const std::string& out_dir) {
  nlohmann::json scalars = nlohmann::json::array();
  store::Statement q = st.db().prepare(
      "SELECT name, step, value, wall_time FROM metrics WHERE run_id = ?1 ORDER BY name, step, id");
  q.bind_text(1, run.id);
  while (q.step()) {
    if (q.column_is_null(2)) continue;  // NaN was stored as NULL: nothing to draw
    scalars.push_back({{"tag", tensorboard_tag(q.column_text(0))},
                       {"step", q.column_int64(1)},
                       {"value", q.column_double(2)},
                       {"wall_time", q.column_double(3)}});
  }
  const nlohmann::json doc = {{"run", run.id}, {"config_yaml", run.config_yaml}, {"scalars", scalars}};
  fs::create_directories(out_dir);
  // Outside the log folder: an interrupted export leaves nothing in it (tools/tensorboard_export.py
  // writes into a temporary folder there that replaces <run id> only when complete).
  const fs::path tmp = fs::temp_directory_path() / ("leap-scalars-" + run.id + "-" + std::to_string(::getpid()) + ".json");
  {
    std::ofstream f(tmp, std::ios::binary);
    f << doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (!f.flush()) throw Error("leap export: cannot write " + tmp.string());
  }
  int rc = 0;
  try {
    rc = run_python_tool("tensorboard_export.py", {"--scalars", tmp.string(), "--out", out_dir});
  } catch (...) {
    fs::remove(tmp);
    throw;
  }
  fs::remove(tmp);
  if (rc != 0) throw Error("leap export: tools/tensorboard_export.py failed (exit " + std::to_string(rc) + ")");
  return static_cast<int64_t>(scalars.size());
}

}  // namespace

Handler add_export(CLI::App& app, const GlobalOptions& g) {
  auto* cmd = app.add_subcommand("export", "Export a run's turns (jsonl: prompt, completion, verdict, rewards, advantage) "
                                            "or its metrics (tensorboard: event files under --out DIR/<run id>)");
  struct Opts {
    std::string run, format = "jsonl", out;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--run", o->run, "run id")->required();
  cmd->add_option("--format", o->format, "jsonl or tensorboard")
      ->check(CLI::IsMember({"jsonl", "tensorboard"}))->capture_default_str();
  cmd->add_option("--out", o->out, "jsonl: output file (default: stdout); tensorboard: the log folder (required)");
  return [o, &g]() -> int {
    if (!fs::exists(g.db)) throw UsageError("leap export: no store at " + g.db + " (give --db PATH)");
    store::OpenOptions oo;
    oo.read_only = true;
    store::Store st(g.db, oo);
    auto run = st.get_run(o->run);
    if (!run) throw UsageError("leap export: no run '" + o->run + "' in " + g.db);
    if (o->format == "tensorboard") {
      if (o->out.empty()) throw UsageError("leap export --format tensorboard: give --out DIR (the TensorBoard log folder)");
      const int64_t n = export_tensorboard(st, *run, o->out);
      std::fprintf(stderr, "exported %lld scalars of run %s; view with: tensorboard --logdir %s\n",
                   static_cast<long long>(n), o->run.c_str(), o->out.c_str());
      return 0;
    }
    int64_t n = 0;
    if (o->out.empty()) {
      n = export_jsonl(st, o->run, std::cout);
      std::cout.flush();
    } else {
      std::ofstream f(o->out, std::ios::binary);
      if (!f) throw Error("leap export: cannot write " + o->out);
      n = export_jsonl(st, o->run, f);
      if (!f.flush()) throw Error("leap export: cannot write " + o->out);
      std::fprintf(stderr, "wrote %lld turns of run %s to %s\n", static_cast<long long>(n), o->run.c_str(), o->out.c_str());
    }
    return 0;
  };
}

}  // namespace leap::cli
