#pragma once
// A task as written in tasks/<set>/<task>/task.yaml (DESIGN.md section 3), and a task set: a
// folder of task folders plus an optional set.yaml. Plain data: no LibTorch, no env types; the
// environment turns a TaskSpec into tensors, a TorchScript reference and a TaskInterface.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace leap::tasks {

/// How an input is initialised. Parameters are numbers or size symbols (`high: C`).
/// `file` is a fixed-value input (weights): raw little-endian values of the declared dtype in
/// C order, the same tensor for every seed and for both the reference and the candidate.
struct InitSpec {
  enum class Kind { normal, uniform, randint, file, none };
  Kind kind = Kind::none;  ///< none: the default for the dtype (normal(0, 1); randint(0, 2) for ints)
  std::string a;           ///< mean (normal) or low (uniform, randint), as written
  std::string b;           ///< std (normal) or high (uniform, randint; exclusive for randint)
  std::string file;        ///< Kind::file: absolute path of the raw values
  bool strict = false;     ///< keep exactly this distribution (no verifier variants)
  /// Fixed values drawn from the distribution (normal or uniform) by a LibTorch CPU generator
  /// seeded with this value (`seed: N`), the same tensor for every seed and for both the reference
  /// and the candidate (compact weights of imported tasks; implies `strict`).
  std::optional<uint64_t> seed;

  /// Value of parameter text `p` (a number or a size symbol of `sizes`). Throws leap::Error.
  static double value(const std::string& p, const std::map<std::string, int64_t>& sizes);
  /// "normal", "uniform", "randint", "file" or "default".
  std::string kind_name() const;
};

/// An input or output tensor.
struct TensorSpec {
  std::string name;
  std::string dtype = "float32";   ///< canonical dtype name (float32, int64, bool, ...)
  std::vector<std::string> shape;  ///< one expression per dim over size symbols; [] = 0-d
  InitSpec init;                   ///< inputs only
  int line = 0;                    ///< 1-based line in task.yaml
};

/// A named scalar a launch may pass.
struct ConstantSpec {
  std::string name;
  double value = 0;
  std::string dtype = "float32";  ///< float32 (default), float64 or int64
};

/// Where the expected outputs come from.
struct ReferenceSpec {
  std::string torchscript;  ///< TorchScript source defining `def reference(...)`, or empty
  std::string file;         ///< absolute path of a saved TorchScript module (.pt), or empty
  int line = 0;
};

/// Correctness tolerance; see docs/env.md for the exact (scale-aware) rule.
struct Tolerance {
  double atol = 1.0e-4;
  double rtol = 1.0e-4;
};

/// One task.
struct TaskSpec {
  std::string name;
  std::string dir;   ///< task folder
  std::string file;  ///< path of task.yaml
  std::optional<int64_t> level;
  std::string category;
  std::string prompt;
  std::vector<std::pair<std::string, int64_t>> sizes;  ///< default sizes, in file order
  std::map<std::string, std::map<std::string, int64_t>> size_overrides;  ///< backend -> overrides
  /// Backends the task has no sizes for (`sizes_<backend>: none`, e.g. a KernelBench problem too
  /// large for the CPU, imported for the GPU only) -> why (`source.cpu_sizes` when given).
  std::map<std::string, std::string> no_sizes;
  std::vector<TensorSpec> inputs;   ///< in call order
  std::vector<TensorSpec> outputs;  ///< in the order of the reference's result tuple
  std::vector<ConstantSpec> constants;
  ReferenceSpec reference;
  Tolerance tolerance;
  std::string hash;  ///< content hash of task.yaml (+ the reference file and the `file` inputs)
  /// Provenance (`source:` mapping of scalars, e.g. benchmark, level, problem_id, sha256 of an
  /// imported KernelBench problem); empty when the task has none.
  std::map<std::string, std::string> source;

  /// Size values for `backend` ("cpu", "cuda"): `sizes` with `sizes_<backend>` applied (`sizes`
  /// alone for a backend in no_sizes: the full sizes).
  std::map<std::string, int64_t> sizes_for(const std::string& backend) const;
  /// Whether the task runs on `backend`: false when its file says `sizes_<backend>: none` (and
  /// allow_full_size was not called). env::RuntimeTask refuses such a task.
  bool runs_on(const std::string& backend) const { return no_sizes.count(backend) == 0; }
  /// Lets a task without sizes for `backend` run there at its full sizes (`--full-size`).
  void allow_full_size(const std::string& backend) { no_sizes.erase(backend); }
  /// The input or output named `name`, or nullptr.
  const TensorSpec* find_tensor(const std::string& name) const;
};

/// A task set: the tasks of a folder and its split.
struct TaskSet {
  std::string name;  ///< set.yaml `name`, else the folder name
  std::string dir;
  std::string description;
  std::vector<TaskSpec> tasks;     ///< sorted by name
  std::vector<std::string> train;  ///< task names of the train split (all tasks if no set.yaml)
  std::vector<std::string> eval;   ///< task names of the eval split (empty if not given)

  /// The task named `name`, or nullptr.
  const TaskSpec* find(const std::string& name) const;
  /// "train", "eval", "train+eval" or "" for a task in no split.
  std::string split_of(const std::string& name) const;
  /// Tasks of the split named `split` ("train", "eval" or "all").
  std::vector<const TaskSpec*> split(const std::string& split) const;
};

/// Canonical dtype names task.yaml accepts (aliases: half, fp16, bf16, float, fp32, double,
/// fp64, int, long). Returns false for an unknown name; `out` gets the canonical name.
bool canonical_dtype(const std::string& text, std::string& out);

/// Loads `<dir>/task.yaml` (or the file itself if `path` is a .yaml file). Throws
/// leap::ConfigError naming the file, the key path and the line for every malformed entry:
/// unknown keys, bad dtypes, shapes using unknown size symbols, a missing or unreadable
/// reference, bad init distributions, bad tolerance values.
TaskSpec load_task(const std::string& path);

/// Loads every task folder (a subfolder with a task.yaml) of `dir`, and `set.yaml` if present
/// (keys: name, description, train, eval; every listed name must be a task). Throws
/// leap::ConfigError (exit 2) for a malformed task or set.yaml, a missing `dir` or one with no tasks.
TaskSet load_task_set(const std::string& dir);

/// Like load_task_set, but a task folder whose task.yaml does not load is left out and its error
/// message (file:line: key: ...) appended to `errors`, so every broken task is reported in one
/// pass (`leap tasks validate`); set.yaml entries naming a left-out task are not an error.
/// Still throws for a missing folder, a bad set.yaml, or a set with no loadable task.
TaskSet load_task_set_collecting(const std::string& dir, std::vector<std::string>& errors);

}  // namespace leap::tasks
