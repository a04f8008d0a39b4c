#pragma once
// `leap tasks generate`: seeded task families with a combinatorial program space, written as
// ordinary task folders (DESIGN.md section 3) with a train / eval split that shares no program
// (docs/generator.md).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tasks/program.hpp"
#include "tasks/program_render.hpp"

namespace leap::tasks {

/// The families generate_tasks knows, in the order `leap tasks generate --help` lists them.
/// "ewred": 1-3 elementwise operators (mul, add, relu, leaky_relu, tanh, sigmoid, abs, square,
/// mul_w, add_w; constants from small fixed sets) then none, sum, mean or max over dim 1, on
/// x [B, N] (B in {4, 8, 16, 32}, N in {32, 64, 128, 256}) and optionally w [N].
const std::vector<std::string>& generator_families();

/// What to generate.
struct GeneratorOptions {
  std::string family = "ewred";
  int64_t count = 0;           ///< tasks in all (train + eval), 1..100000
  uint64_t seed = 0;           ///< the draw; equal options give byte-identical folders
  double eval_fraction = 0.2;  ///< share of `count` in the eval split, in [0, 1)
  Spelling spelling = Spelling::varied;
  Naming naming = Naming::reuse;  ///< how the prompt names its values (program_render.hpp)
};

/// One generated task: its folder's files (relative path -> content).
struct GeneratedTask {
  std::string name;   ///< "<family>_<index>", index in draw order (4 digits or more)
  std::string split;  ///< "train" or "eval"
  std::string key;    ///< program_key(program): the canonical program
  Program program;
  int64_t rows = 0, cols = 0;  ///< sizes B and N
  std::vector<std::pair<std::string, std::string>> files;  ///< task.yaml, solutions/cpu_model.md
};

/// A generated set: the tasks (train first, then eval, each in draw order) and set.yaml.
struct GeneratedSet {
  std::string name;      ///< "<family>_s<seed>_n<count>"
  std::string set_yaml;  ///< name, description, train and eval lists
  std::vector<GeneratedTask> tasks;
};

/// The split a program belongs to: "eval" when fnv1a64(key) mod 10^6 < eval_fraction * 10^6, else
/// "train". It depends on the canonical key and the fraction only, so sets drawn with different
/// seeds or counts never put one program into different splits.
std::string split_of_program(const std::string& key, double eval_fraction);

/// Draws `count` distinct programs (distinct canonical keys) of the family. A drawn program is
/// kept only if it is already in canonical form (so the prompt shows the canonical chain), is
/// not degenerate (its double-precision outputs on seeded normal inputs, at scale 1 and 100, are
/// finite and not constant), and its split (split_of_program) still has room: round(count *
/// eval_fraction) eval tasks, the rest train. Throws leap::UsageError for an unknown family, a
/// count outside 1..100000 or a fraction outside [0, 1); leap::Error if the family's space
/// cannot fill the count (after 2000 draws per task).
GeneratedSet generate_tasks(const GeneratorOptions& opt);

/// Writes `set` to `out` (set.yaml and one folder per task) through a temporary sibling folder
/// renamed into place, so `out` is either absent or complete. Throws leap::UsageError when `out`
/// exists and is not an empty folder, leap::Error when a write fails (nothing is left behind).
void write_generated_set(const GeneratedSet& set, const std::filesystem::path& out);

}  // namespace leap::tasks
