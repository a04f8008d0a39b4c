// `leap tasks`: list, show, validate and import task sets.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/environment.hpp"
#include "env/binding.hpp"
#include "env/errors.hpp"
#include "env/extract.hpp"
#include "env/launch_plan.hpp"
#include "env/reference.hpp"
#include "cli/python.hpp"
#include "env/validate.hpp"
#include "tasks/generator.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"
#include "util/sha256.hpp"

namespace leap::cli {

namespace {

namespace fs = std::filesystem;

std::string sizes_text(const std::map<std::string, int64_t>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += (s.empty() ? "" : ", ") + k + "=" + std::to_string(v);
  return s;
}

std::string shape_text(const std::vector<std::string>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + shape[i];
  return s + "]";
}

int tasks_list(const std::string& dir) {
  tasks::TaskSet set = tasks::load_task_set(dir);
  size_t w = 4;
  for (const auto& t : set.tasks) w = std::max(w, t.name.size());
  size_t on_cpu = 0, on_cuda = 0;
  for (const auto& t : set.tasks) {
    on_cpu += t.runs_on("cpu");
    on_cuda += t.runs_on("cuda");
  }
  std::printf("task set %s (%s): %zu tasks, %zu train, %zu eval; the cpu backend runs %zu, the cuda backend %zu\n",
              set.name.c_str(), dir.c_str(), set.tasks.size(), set.train.size(), set.eval.size(), on_cpu, on_cuda);
  std::printf("%-*s  %5s  %-14s  %-10s  %s\n", int(w), "task", "level", "category", "split", "sizes (cpu)");
  for (const auto& t : set.tasks)
    std::printf("%-*s  %5s  %-14s  %-10s  %s\n", int(w), t.name.c_str(), t.level ? std::to_string(*t.level).c_str() : "-",
                t.category.empty() ? "-" : t.category.c_str(), set.split_of(t.name).c_str(),
                t.runs_on("cpu") ? sizes_text(t.sizes_for("cpu")).c_str() : "none (GPU only)");
  return 0;
}

int tasks_show(const std::string& task, const std::string& dir) {
  std::string path = task;
  if (!fs::exists(path)) path = (fs::path(dir) / task).string();
  if (!fs::exists(path)) throw UsageError("leap tasks show: no task folder '" + task + "' (nor " + path + ")");
  tasks::TaskSpec t = tasks::load_task(path);
  std::printf("name:      %s\nfile:      %s\nlevel:     %s\ncategory:  %s\nhash:      %s\n", t.name.c_str(),
              t.file.c_str(), t.level ? std::to_string(*t.level).c_str() : "-", t.category.c_str(), t.hash.c_str());
  std::map<std::string, int64_t> def(t.sizes.begin(), t.sizes.end());
  std::printf("sizes:     %s\n", sizes_text(def).c_str());
  for (const auto& [b, m] : t.size_overrides) std::printf("sizes_%s: %s\n", b.c_str(), sizes_text(m).c_str());
  std::printf("inputs:\n");
  for (const auto& i : t.inputs) {
    std::string init = i.init.kind_name();
    if (i.init.kind == tasks::InitSpec::Kind::file)
      init += " " + i.init.file;
    else if (i.init.kind != tasks::InitSpec::Kind::none)
      init += "(" + i.init.a + ", " + i.init.b + ")";
    if (i.init.seed) init += " seed " + std::to_string(*i.init.seed);
    if (i.init.strict) init += " strict";
    std::printf("  %-12s %-8s %-20s init %s\n", i.name.c_str(), i.dtype.c_str(), shape_text(i.shape).c_str(), init.c_str());
  }
  std::printf("outputs:\n");
  for (const auto& o : t.outputs)
    std::printf("  %-12s %-8s %s\n", o.name.c_str(), o.dtype.c_str(), shape_text(o.shape).c_str());
  if (!t.constants.empty()) {
    std::printf("constants:\n");
    for (const auto& c : t.constants) std::printf("  %-12s %-8s %g\n", c.name.c_str(), c.dtype.c_str(), c.value);
  }
  std::printf("tolerance: atol %g, rtol %g\n", t.tolerance.atol, t.tolerance.rtol);
  if (!t.reference.torchscript.empty())
    std::printf("reference (torchscript):\n%s\n", t.reference.torchscript.c_str());
  else
    std::printf("reference (file): %s\n", t.reference.file.c_str());
  std::printf("prompt:\n%s\n", t.prompt.c_str());
  return 0;
}

std::vector<fs::path> solution_files(const std::string& dir, const std::string& prefix) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (e.is_regular_file() && e.path().extension() == ".md" && n.rfind(prefix, 0) == 0) out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Checks a cuda answer without a GPU: extract, parse the plan, compile with NVRTC, bind against the
// CUBIN's kernels. Returns "" when all of it passes, else the verdict and feedback.
std::string check_cuda_compiles(env::Backend& cuda, const env::RuntimeTask& rt, const std::string& answer) {
  try {
    env::ExtractedAnswer ans = env::extract_answer(answer, env::CodeLanguage::cuda);
    env::PlanParseOptions po = cuda.plan_options();
    po.line_offset = ans.plan_line - 1;
    env::LaunchPlan plan = env::parse_launch_plan(ans.plan_yaml, rt.interface(), po);
    env::CompileOutcome c = cuda.compile(ans.code, plan);
    if (!c.ok) return "compile_error\n      " + c.feedback;
    env::bind_plan(plan, rt.interface(), cuda.limits(), &c.artifact.exports);
  } catch (const env::FormatError& e) {
    return std::string("format_error\n      ") + e.what();
  } catch (const env::LaunchError& e) {
    return std::string("launch_error\n      ") + e.what();
  }
  return "";
}

int tasks_validate(const std::string& dir, const config::Experiment& exp_in, bool timing, const std::string& results_dir,
                   bool full_size) {
  config::Experiment exp = exp_in;
  // Every broken task.yaml is reported (file:line: key: ...), then the loadable tasks are checked.
  std::vector<std::string> load_errors;
  tasks::TaskSet set = tasks::load_task_set_collecting(dir, load_errors);
  for (const auto& e : load_errors) std::printf("FAIL %s\n", e.c_str());
  auto envp = make_environment(with_cache_root(exp.env, results_dir), "cpu");
  env::VerifierOptions vo = verifier_options(exp.env);
  vo.timing = timing;
  env::Verifier verifier(envp->backend, envp->pool, vo);
  int problems = 0, weak_tasks = 0, cuda_skipped = 0, cuda_compiled = 0, solutions_ok = 0, no_cpu_solution = 0;
  // cuda solutions are compiled with NVRTC (no GPU needed) and bound against their kernels; they
  // are run only by `leap eval --backend cuda` on a GPU machine.
  std::shared_ptr<env::Backend> cuda_backend;
  std::string no_cuda;
  try {
    fs::path cdir = envp->temp_cache ? fs::path(envp->cache_dir) / "cuda" : fs::path(envp->cache_dir).parent_path() / "cuda";
    fs::create_directories(cdir);
    cuda_backend = make_cuda_backend(exp.env, cdir.string(), false);
  } catch (const std::exception& e) {
    no_cuda = e.what();
  }
  std::printf("validating task set %s (%s): %zu tasks, cpu backend%s\n", set.name.c_str(), dir.c_str(), set.tasks.size(),
              timing ? "" : " (correctness only; --time to time the solutions)");
  int gpu_only = 0;
  for (auto spec : set.tasks) {
    if (full_size) spec.allow_full_size("cpu");
    if (!spec.runs_on("cpu")) {  // imported for the GPU only: its sizes are not for this machine
      ++gpu_only;
      std::printf("%-4s %s\n     no cpu sizes: %s (--full-size runs it here at its full sizes)\n", "skip",
                  spec.name.c_str(), spec.no_sizes.at("cpu").c_str());
      continue;
    }
    std::vector<std::string> notes;
    bool bad = false;
    if (spec.prompt.find_first_not_of(" \t\r\n") == std::string::npos)  // a warning: the env's checks pass
      notes.push_back("WARNING NO PROMPT: " + spec.file + " has no 'prompt': a model would be shown an empty problem");
    std::unique_ptr<env::RuntimeTask> rt;
    try {
      rt = std::make_unique<env::RuntimeTask>(spec, "cpu");
      auto weak = env::find_weaknesses(*rt, vo);
      if (!weak.empty()) {
        ++weak_tasks;
        bad = true;
        for (const auto& w : weak) notes.push_back("WEAK " + w.kind + ": " + w.detail);
      }
    } catch (const std::exception& e) {
      bad = true;
      notes.push_back(std::string("REFERENCE ERROR: ") + e.what());
    }
    auto cpu = solution_files((fs::path(spec.dir) / "solutions").string(), "cpu_");
    auto cuda = solution_files((fs::path(spec.dir) / "solutions").string(), "cuda_");
    if (rt) {
      std::vector<GradeJob> jobs;
      for (const auto& f : cpu) jobs.push_back({rt.get(), f.string(), env::read_answer_file(f.string())});
      std::vector<env::EvalResult> results;
      try {
        results = grade_all(verifier, jobs, static_cast<int>(exp.env.workers));
      } catch (const std::exception& e) {
        bad = true;
        notes.push_back(std::string("ERROR while grading solutions: ") + e.what());
      }
      for (size_t i = 0; i < results.size(); ++i) {
        std::string name = fs::path(jobs[i].file).filename().string();
        if (results[i].is_correct()) {
          ++solutions_ok;
          std::string t = results[i].candidate_ms == results[i].candidate_ms
                              ? " (" + std::to_string(results[i].speedup).substr(0, 5) + "x)"
                              : "";
          notes.push_back(name + ": correct" + t);
        } else {
          bad = true;
          notes.push_back("SOLUTION " + name + ": " + std::string(env::to_string(results[i].verdict)) + "\n      " +
                          results[i].feedback);
        }
      }
    }
    for (const auto& f : cuda) {
      if (!cuda_backend || !rt) {
        ++cuda_skipped;
        notes.push_back(f.filename().string() + ": skipped (" + (rt ? no_cuda : std::string("no reference")) + ")");
        continue;
      }
      std::string err = check_cuda_compiles(*cuda_backend, *rt, env::read_answer_file(f.string()));
      if (err.empty()) {
        ++cuda_compiled;
        notes.push_back(f.filename().string() + ": compiles (NVRTC); not run here");
      } else {
        bad = true;
        notes.push_back("SOLUTION " + f.filename().string() + ": " + err);
      }
    }
    no_cpu_solution += cpu.empty();  // counted in the summary: a note under every imported task was noise
    problems += bad;
    std::printf("%-4s %s\n", bad ? "FAIL" : "ok", spec.name.c_str());
    for (const auto& n : notes) std::printf("     %s\n", n.c_str());
  }
  problems += static_cast<int>(load_errors.size());
  std::printf("\n%zu tasks: %d with problems, %d weak; %d cpu solutions correct (%d tasks ship none); %d cuda solutions "
              "compile (not run: `leap eval --backend cuda` on a GPU runs them); %d cuda solutions skipped; %d tasks for "
              "the GPU only not run%s\n",
              set.tasks.size() + load_errors.size(), problems, weak_tasks, solutions_ok, no_cpu_solution, cuda_compiled,
              cuda_skipped, gpu_only,
              load_errors.empty() ? "" : fmt::format("; {} task.yaml files do not load (listed first)", load_errors.size()).c_str());
  if (!load_errors.empty()) return 2;  // a malformed task file is a config error
  return problems ? 1 : 0;
}

/// Compares the fixed values LibTorch draws for `init: {..., seed: N}` inputs with the values the
/// import tool used (<task>/weights/.check/<input>.sha256: the SHA-256 of their little-endian
/// bytes at the cpu sizes), and removes those files when they agree. Throws leap::Error naming every input that differs.
void check_seeded_weights(const tasks::TaskSet& set) {
  std::vector<std::string> bad;
  int checked = 0;
  for (const auto& spec : set.tasks) {
    const fs::path cdir = fs::path(spec.dir) / "weights" / ".check";
    if (!fs::is_directory(cdir)) continue;
    env::RuntimeTask rt(spec, spec.runs_on("cpu") ? "cpu" : "cuda");  // (drawn on the CPU either way)
    const std::vector<torch::Tensor> ins = env::make_inputs(rt, 0, 0);
    bool ok = true;
    for (size_t i = 0; i < spec.inputs.size(); ++i) {
      if (!spec.inputs[i].init.seed) continue;
      const fs::path f = cdir / (spec.inputs[i].name + ".sha256");
      const torch::Tensor t = ins[i].contiguous();
      const std::string got =
          util::sha256_hex(std::string_view(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size()));
      std::string want = fs::exists(f) ? slurp(f) : std::string();
      while (!want.empty() && (want.back() == '\n' || want.back() == ' ')) want.pop_back();
      if (want != got) {
        ok = false;
        bad.push_back(spec.name + "." + spec.inputs[i].name);
      }
      ++checked;
    }
    if (ok) fs::remove_all(cdir);
  }
  if (!bad.empty())
    throw Error("leap tasks import: LibTorch's generator does not reproduce the fixed values the import used for " +
                std::to_string(bad.size()) + " inputs (first: " + bad.front() +
                "); this LibTorch differs from the Python torch the import ran with");
  if (checked) std::printf("%d seeded fixed-value inputs: LibTorch reproduces the import's values exactly\n", checked);
}

uintmax_t folder_bytes(const fs::path& dir) {
  uintmax_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) total += e.file_size();
  return total;
}

/// `leap tasks import kernelbench`: runs tools/kernelbench_import.py, then loads the result.
int tasks_import(const std::string& kb_dir, const std::string& out, const std::string& levels, double timeout_s,
                 double memory_gb, double cpu_ms, bool force) {
  if (!fs::is_directory(kb_dir)) throw UsageError("leap tasks import: " + kb_dir + " is not a folder");
  for (size_t i = 0, j; i <= levels.size(); i = j + 1) {
    j = levels.find(',', i);
    if (j == std::string::npos) j = levels.size();
    std::string l = levels.substr(i, j - i);
    if (l.empty() || l.find_first_not_of("0123456789") != std::string::npos)
      throw UsageError("leap tasks import: --levels " + levels + ": expected comma-separated level numbers, e.g. 1,2");
  }
  std::vector<std::string> args = {kb_dir,        "--out",    out, "--levels", levels,
                                   "--memory-gb", fmt::format("{:g}", memory_gb), "--cpu-ms", fmt::format("{:g}", cpu_ms)};
  if (timeout_s >= 0) {  // else the tool's per-level defaults
    args.push_back("--timeout");
    args.push_back(fmt::format("{:g}", timeout_s));
  }
  if (force) args.push_back("--force");
  const int rc = run_python_tool("kernelbench_import.py", args);
  if (rc == 2) throw UsageError("leap tasks import: the import tool rejected its arguments (see above)");
  if (rc != 0) throw Error("leap tasks import: tools/kernelbench_import.py failed with exit status " + std::to_string(rc));
  tasks::TaskSet set = tasks::load_task_set(out);  // the written task.yaml files must load
  check_seeded_weights(set);
  std::printf("task set %s: %zu tasks load, %.1f MB on disk; check them with: leap tasks validate %s\n",
              set.name.c_str(), set.tasks.size(), static_cast<double>(folder_bytes(out)) / 1e6, out.c_str());
  return 0;
}

/// `leap tasks generate FAMILY --count N --seed S --out DIR`: draws the set, writes it whole.
int tasks_generate(const tasks::GeneratorOptions& opt, const std::string& out) {
  if (out.empty()) throw UsageError("leap tasks generate: --out DIR is required");
  tasks::GeneratedSet set = tasks::generate_tasks(opt);
  tasks::write_generated_set(set, out);
  size_t n_eval = 0;
  for (const auto& t : set.tasks) n_eval += t.split == "eval";
  std::printf("wrote task set %s to %s: %zu tasks (%zu train, %zu eval), each a distinct program; check them with: "
              "leap tasks validate %s\n",
              set.name.c_str(), out.c_str(), set.tasks.size(), set.tasks.size() - n_eval, n_eval, out.c_str());
  return 0;
}

}  // namespace

Handler add_tasks(CLI::App& app, const GlobalOptions& g) {
  auto* cmd = app.add_subcommand("tasks", "List, show, validate, generate and import task sets");
  cmd->require_subcommand(1);
  struct Opts {
    std::string dir = "tasks/starter", task, kb_dir, out = "tasks/kernelbench", levels = "1,2,3", source, config;
    double timeout_s = -1, memory_gb = 0, cpu_ms = 100;
    bool force = false;
    std::vector<std::string> sets;
    bool time = false;
    bool full_size = false;
    std::string family, gen_out, spellings = "varied", names = "reuse";
    int64_t count = 0;
    uint64_t seed = 0;
    double eval_fraction = 0.2;
  };
  auto o = std::make_shared<Opts>();
  auto* list = cmd->add_subcommand("list", "List the tasks of a task set with level, category and split");
  list->add_option("dir", o->dir, "task-set folder")->capture_default_str();
  auto* show = cmd->add_subcommand("show", "Show one task: sizes, inputs, outputs, reference, prompt");
  show->add_option("task", o->task, "task folder or name")->required();
  show->add_option("--dir", o->dir, "task-set folder a bare name is looked up in")->capture_default_str();
  auto* validate = cmd->add_subcommand("validate", "Compile references, run shipped solutions, flag weak tasks");
  validate->add_option("dir", o->dir, "task-set folder")->capture_default_str();
  validate->add_option("--config", o->config, "experiment YAML for the env settings");
  validate->add_option("--set", o->sets, "override one config key (repeatable)")->type_name("KEY.PATH=VALUE");
  validate->add_flag("--time", o->time, "also time the shipped solutions");
  validate->add_flag("--full-size", o->full_size,
                     "also run the tasks without cpu sizes (sizes_cpu: none, imported for the GPU only) at their "
                     "full sizes");
  auto* import = cmd->add_subcommand("import", "Import a benchmark into leap task folders");
  import->add_option("source", o->source, "benchmark name: kernelbench")->required()->check(CLI::IsMember({"kernelbench"}));
  import->add_option("kb_dir", o->kb_dir, "KernelBench checkout root or a folder of problem files")->required();
  import->add_option("--out", o->out, "output task-set folder")->capture_default_str();
  import->add_option("--levels", o->levels, "comma-separated levels")->capture_default_str();
  import->add_option("--timeout", o->timeout_s,
                     "seconds one problem may take (its Model run included); 0 = no limit; default by level: 300 s "
                     "for levels 1 and 2, 900 s for level 3")
      ->check(CLI::Range(0.0, 86400.0));
  import->add_option("--memory-gb", o->memory_gb,
                     "memory budget of one problem's conversion, GiB; larger problems are traced at scaled sizes "
                     "(0 = half the machine's memory)")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  import->add_option("--cpu-ms", o->cpu_ms, "target time of the reference on one core at the cpu sizes (sizes_cpu)")
      ->check(CLI::Range(1.0, 60000.0))
      ->capture_default_str();
  import->add_flag("--force", o->force, "redo problems already imported or skipped from the same source");
  std::string families;
  for (const auto& f : tasks::generator_families()) families += (families.empty() ? "" : ", ") + f;
  auto* gen = cmd->add_subcommand("generate", "Generate a task family with a train / eval split sharing no program "
                                              "(docs/generator.md)");
  gen->add_option("family", o->family, "task family: " + families)->required();
  gen->add_option("--count", o->count, "number of tasks (train + eval), each a distinct program")->required();
  gen->add_option("--seed", o->seed, "seed of the draw (equal arguments give byte-identical folders)")
      ->capture_default_str();
  gen->add_option("--out", o->gen_out, "output folder (must not exist or be empty)")->required();
  gen->add_option("--eval-fraction", o->eval_fraction, "share of the tasks in the eval split, in [0, 1)")
      ->capture_default_str();
  gen->add_option("--spellings", o->spellings,
                  "varied: each prompt line in one of 2-3 equivalent PyTorch spellings; canonical: always the first")
      ->check(CLI::IsMember({"varied", "canonical"}))
      ->capture_default_str();
  gen->add_option("--names", o->names,
                  "reuse: every forward line assigns x; numbered: line i assigns x<i> (x1 = torch.tanh(x)), and "
                  "the answer's return comment comes first")
      ->check(CLI::IsMember({"reuse", "numbered"}))
      ->capture_default_str();
  return [o, list, show, validate, gen, &g]() -> int {
    if (gen->parsed()) {
      tasks::GeneratorOptions go;
      go.family = o->family;
      go.count = o->count;
      go.seed = o->seed;
      go.eval_fraction = o->eval_fraction;
      go.spelling = o->spellings == "canonical" ? tasks::Spelling::canonical : tasks::Spelling::varied;
      go.naming = o->names == "numbered" ? tasks::Naming::numbered : tasks::Naming::reuse;
      return tasks_generate(go, o->gen_out);
    }
    if (list->parsed()) return tasks_list(o->dir);
    if (show->parsed()) return tasks_show(o->task, o->dir);
    if (validate->parsed()) return tasks_validate(o->dir, experiment_from_flags(o->config, o->sets), o->time, g.results_dir,
                                                 o->full_size);
    return tasks_import(o->kb_dir, o->out, o->levels, o->timeout_s, o->memory_gb, o->cpu_ms, o->force);
  };
}

}  // namespace leap::cli
