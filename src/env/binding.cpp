#include "env/binding.hpp"

#include <cmath>

#include "env/errors.hpp"

namespace leap::env {

int64_t BoundTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

size_t BoundTensor::bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }

int BoundPlan::tensor_index(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

namespace {

std::string at(const std::string& path, int line) {
  return line > 0 ? path + " (line " + std::to_string(line) + ")" : path;
}

int64_t eval_launch(const Expr& e, const ExprEnv& env, const std::string& where) {
  try {
    return e.eval(env);
  } catch (const ExprError& err) {
    throw LaunchError(where + ": '" + e.text() + "' cannot be evaluated: " + err.reason() +
                      " (column " + std::to_string(err.column()) + ")");
  }
}

std::string sizes_text(const ExprEnv& env) {
  std::string s;
  for (const auto& [k, v] : env.symbols) s += (s.empty() ? "" : ", ") + k + "=" + std::to_string(v);
  return s;
}

}  // namespace

namespace {

/// A task tensor with its shape evaluated over the task's sizes (added to env.shapes).
BoundTensor bind_task_tensor(const TensorDecl& t, TensorRole role, ExprEnv& env) {
  BoundTensor b{t.name, t.dtype, {}, role};
  for (size_t i = 0; i < t.shape.size(); ++i) {
    try {
      int64_t d = Expr::parse(t.shape[i]).eval(env);
      if (d < 0) throw Error("negative");
      b.shape.push_back(d);
    } catch (const Error& e) {
      throw Error("task tensor '" + t.name + "' shape[" + std::to_string(i) + "] '" + t.shape[i] +
                  "' is not a valid size with " + sizes_text(env) + ": " + e.what());
    }
  }
  env.shapes[t.name] = b.shape;
  return b;
}

/// The plan's scratch buffers, their bytes summed against limits.max_scratch_bytes.
void bind_scratch(const LaunchPlan& plan, const LaunchLimits& limits, ExprEnv& env, BoundPlan& out) {
  int64_t scratch_bytes = 0;
  for (const auto& s : plan.scratch) {
    BoundTensor b{s.name, s.dtype, {}, TensorRole::scratch};
    for (size_t i = 0; i < s.shape.size(); ++i) {
      std::string where = at("scratch." + s.name + ".shape[" + std::to_string(i) + "]", s.line);
      int64_t d = eval_launch(s.shape[i], env, where);
      if (d < 0) throw LaunchError(where + ": '" + s.shape[i].text() + "' = " + std::to_string(d) + " is negative");
      b.shape.push_back(d);
    }
    double bytes = static_cast<double>(dtype_size(s.dtype));
    for (int64_t d : b.shape) bytes *= static_cast<double>(d);
    scratch_bytes += static_cast<int64_t>(std::min(bytes, 9e18));
    if (limits.max_scratch_bytes > 0 && scratch_bytes > limits.max_scratch_bytes)
      throw LaunchError(at("scratch." + s.name, s.line) + ": scratch buffers need " + std::to_string(scratch_bytes) +
                        " bytes, more than the limit of " + std::to_string(limits.max_scratch_bytes) +
                        (limits.max_scratch_source.empty() ? "" : " (" + limits.max_scratch_source + ")"));
    env.shapes[s.name] = b.shape;
    out.tensors.push_back(std::move(b));
  }
}

/// Throws LaunchError at `path` when the compiled code does not export `kernel` (a hint when a
/// C++-mangled name holds it).
void check_exported(const std::string& kernel, const std::set<std::string>& exports, const std::string& path) {
  if (exports.count(kernel)) return;
  std::string list, hint;
  for (const auto& e : exports) {
    list += (list.empty() ? "" : ", ") + e;
    if (e != kernel && e.find(kernel) != std::string::npos && e.rfind("_Z", 0) == 0)
      hint = " ('" + e + "' looks like a C++-mangled name: declare the function extern \"C\")";
  }
  throw LaunchError(path + ": unknown kernel '" + kernel + "': the compiled code exports " +
                    (list.empty() ? "no functions" : list) + hint);
}

/// Grid and block dimensions (each at least 1, within the device's limits), the threads per
/// block and the dynamic shared memory of launch `spec`; `path_at(sub)` names a key's location.
template <class PathAt>
void bind_dims(const LaunchSpec& spec, const LaunchLimits& limits, const ExprEnv& env, const PathAt& path_at,
               BoundLaunch& b) {
  for (int which = 0; which < 2; ++which) {
    const auto& dims = which == 0 ? spec.grid : spec.block;
    auto& outd = which == 0 ? b.grid : b.block;
    const char* name = which == 0 ? "grid" : "block";
    const auto& maxd = which == 0 ? limits.max_grid : limits.max_block;
    for (size_t i = 0; i < dims.size() && i < 3; ++i) {
      std::string where = path_at(std::string(".") + name + "[" + std::to_string(i) + "]");
      int64_t v = eval_launch(dims[i], env, where);
      if (v < 1)
        throw LaunchError(where + ": '" + dims[i].text() + "' = " + std::to_string(v) + "; every " + name +
                          " dimension must be at least 1");
      if (maxd[i] > 0 && v > maxd[i])
        throw LaunchError(where + ": '" + dims[i].text() + "' = " + std::to_string(v) + " exceeds the device limit of " +
                          std::to_string(maxd[i]));
      outd[i] = v;
    }
  }
  int64_t threads = b.block[0] * b.block[1] * b.block[2];
  if (limits.max_threads_per_block > 0 && threads > limits.max_threads_per_block)
    throw LaunchError(path_at(".block") + ": " + std::to_string(threads) + " threads per block exceed the limit of " +
                      std::to_string(limits.max_threads_per_block));
  b.shared_bytes = eval_launch(spec.shared_bytes, env, path_at(".shared_bytes"));
  if (b.shared_bytes < 0)
    throw LaunchError(path_at(".shared_bytes") + ": '" + spec.shared_bytes.text() + "' = " +
                      std::to_string(b.shared_bytes) + " is negative");
  if (limits.max_shared_bytes > 0 && b.shared_bytes > limits.max_shared_bytes)
    throw LaunchError(path_at(".shared_bytes") + ": " + std::to_string(b.shared_bytes) + " bytes exceed the limit of " +
                      std::to_string(limits.max_shared_bytes));
}

/// Launch `spec`'s arguments: tensors by name, constants by name, int64 expressions evaluated.
template <class PathAt>
void bind_args(const LaunchSpec& spec, const TaskInterface& task, const ExprEnv& env, const BoundPlan& out,
               const std::string& path, const PathAt& path_at, BoundLaunch& b) {
  for (size_t ai = 0; ai < spec.args.size(); ++ai) {
    const PlanArg& a = spec.args[ai];
    BoundArg ba;
    ba.kind = a.kind;
    switch (a.kind) {
      case ArgKind::tensor:
        ba.tensor = out.tensor_index(a.name);
        if (ba.tensor < 0) throw LaunchError(path + ": unknown tensor '" + a.name + "'");
        break;
      case ArgKind::float32:
      case ArgKind::float64: {
        const ConstantDecl* c = task.find_constant(a.name);
        if (!c) throw LaunchError(path + ": unknown constant '" + a.name + "'");
        ba.f = c->value;
        break;
      }
      case ArgKind::int64:
        ba.i = eval_launch(a.expr, env, path_at(".args[" + std::to_string(ai) + "]"));
        break;
    }
    b.args.push_back(ba);
  }
}

}  // namespace

BoundPlan bind_plan(const LaunchPlan& plan, const TaskInterface& task, const LaunchLimits& limits,
                    const std::set<std::string>* exports) {
  BoundPlan out;
  ExprEnv env;
  env.symbols = task.sizes;
  for (const auto& c : task.constants)
    if (c.type == ScalarType::int64) env.symbols[c.name] = static_cast<int64_t>(std::llround(c.value));
  for (const auto& t : task.inputs) out.tensors.push_back(bind_task_tensor(t, TensorRole::input, env));
  for (const auto& t : task.outputs) out.tensors.push_back(bind_task_tensor(t, TensorRole::output, env));
  bind_scratch(plan, limits, env, out);
  for (size_t li = 0; li < plan.launches.size(); ++li) {
    const LaunchSpec& spec = plan.launches[li];
    const std::string base = "launches[" + std::to_string(li) + "]";
    // A location: the key path, then the plan line.
    auto path_at = [&](const std::string& sub) { return at(base + sub, spec.line); };
    const std::string path = path_at("");
    BoundLaunch b;
    b.kernel = spec.kernel;
    b.signature = spec.signature();
    if (exports) check_exported(spec.kernel, *exports, path);
    bind_dims(spec, limits, env, path_at, b);
    bind_args(spec, task, env, out, path, path_at, b);
    out.launches.push_back(std::move(b));
  }
  return out;
}

}  // namespace leap::env
