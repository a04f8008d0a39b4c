#pragma once
// The ```yaml launch plan of a solution: scratch buffers and the ordered kernel launches.
#include <string>
#include <string_view>
#include <vector>

#include "env/dtype.hpp"
#include "env/expr.hpp"
#include "env/task_interface.hpp"

namespace leap::env {

/// Largest launch plan (the ```yaml block's body) parse_launch_plan accepts, in bytes.
inline constexpr size_t kMaxPlanBytes = 64 * 1024;
/// Deepest nesting of YAML flow lists and mappings (`[`, `{`) in a launch plan.
inline constexpr int kMaxPlanNesting = 32;
/// Most launches in one plan.
inline constexpr size_t kMaxPlanLaunches = 64;
/// Most scratch buffers in one plan.
inline constexpr size_t kMaxPlanScratch = 64;
/// Most arguments of one launch.
inline constexpr size_t kMaxLaunchArgs = 128;

/// How one launch argument is passed to the kernel.
enum class ArgKind {
  tensor,   ///< pointer to the tensor's first element (`void*`-compatible)
  int64,    ///< an expression (or int64 constant), passed as int64_t
  float32,  ///< a float32 constant, passed as float
  float64,  ///< a float64 constant, passed as double
};

/// One argument of a launch, classified at parse time.
struct PlanArg {
  ArgKind kind = ArgKind::int64;
  std::string name;  ///< tensor or constant name (empty for a pure expression)
  Expr expr;         ///< the expression, for ArgKind::int64 that is not a constant
  std::string text;  ///< as written
};

/// A temporary buffer, zero-filled before the launches.
struct ScratchDecl {
  std::string name;
  DType dtype = DType::float32;
  std::vector<Expr> shape;  ///< over size symbols and numel/dim of inputs and outputs
  int line = 0;             ///< line in the answer (or the plan if no offset was given)
};

/// One kernel launch.
struct LaunchSpec {
  std::string kernel;       ///< extern "C" entry point
  std::vector<Expr> grid;   ///< 1-3 expressions (x, y, z); default {1} where not required
  std::vector<Expr> block;  ///< 1-3 expressions; default {1} where not required
  Expr shared_bytes;        ///< dynamic shared memory in bytes; default 0
  std::vector<PlanArg> args;
  int line = 0;

  /// Parameter classes in order, one char each: p (pointer), i (int64), f (float), d (double).
  std::string signature() const;
};

/// A parsed, name-checked launch plan.
struct LaunchPlan {
  std::vector<ScratchDecl> scratch;
  std::vector<LaunchSpec> launches;  ///< never empty

  /// Distinct launch signatures, sorted (what a cpu trampoline set must cover).
  std::vector<std::string> signatures() const;
};

/// Options for parse_launch_plan.
struct PlanParseOptions {
  bool require_grid_block = true;  ///< cuda: grid and block must be given; cpu: optional
  int line_offset = 0;             ///< added to plan line numbers (answer line of the plan - 1)
};

/// Parses and checks a launch plan against the task's names. Throws FormatError naming the key
/// path and line for: YAML syntax, a non-mapping top level, unknown keys, missing `launches`,
/// an empty launch list, a bad kernel name, grid/block with 0 or more than 3 dims, bad
/// expressions (with column), unknown symbols or tensors, scratch names that clash or whose
/// dtype is unknown, and for a plan past a limit (kMaxPlanBytes, kMaxPlanNesting,
/// kMaxPlanLaunches, kMaxPlanScratch, kMaxLaunchArgs, and the expression limits of expr.hpp),
/// naming the limit; the size and nesting limits are checked before the YAML is parsed. YAML flow
/// lists split at commas inside calls (`[ceil_div(N, 256)]`) are rejoined until the parentheses
/// balance.
LaunchPlan parse_launch_plan(std::string_view yaml, const TaskInterface& task,
                             const PlanParseOptions& options = {});

}  // namespace leap::env
