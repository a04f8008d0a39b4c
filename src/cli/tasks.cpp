// `leap tasks`: list, show, validate and import task sets.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"

namespace leap::cli {

Handler add_tasks(CLI::App& app, const GlobalOptions& g) {
  auto* cmd = app.add_subcommand("tasks", "List, show, validate and import task sets");
  cmd->require_subcommand(1);
  struct Opts {
    std::string dir = "tasks/starter", task, kb_dir, out = "tasks/kernelbench", levels = "1,2,3", source;
  };
  auto o = std::make_shared<Opts>();
  auto* list = cmd->add_subcommand("list", "List the tasks of a task set with level, category and split");
  list->add_option("dir", o->dir, "task-set folder")->capture_default_str();
  auto* show = cmd->add_subcommand("show", "Show one task: sizes, inputs, outputs, reference, prompt");
  show->add_option("task", o->task, "task folder or name")->required();
  auto* validate = cmd->add_subcommand("validate", "Compile references, run shipped solutions, flag weak tasks");
  validate->add_option("dir", o->dir, "task-set folder")->capture_default_str();
  auto* import = cmd->add_subcommand("import", "Import a benchmark into leap task folders");
  import->add_option("source", o->source, "benchmark name: kernelbench")->required()->check(CLI::IsMember({"kernelbench"}));
  import->add_option("kb_dir", o->kb_dir, "KernelBench checkout root or a folder of problem files")->required();
  import->add_option("--out", o->out, "output task-set folder")->capture_default_str();
  import->add_option("--levels", o->levels, "comma-separated levels")->capture_default_str();
  return [cmd, list, show, validate, import]() -> int {
    if (list->parsed() || show->parsed() || validate->parsed())
      not_built("leap tasks " + cmd->get_subcommands().front()->get_name(),
                "Kernel environment I: task sets, solution format, honest verifier");
    not_built("leap tasks import", "KernelBench import, leap eval --bench, and leap report");
  };
}

}  // namespace leap::cli
