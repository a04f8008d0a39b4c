#include "env/launch_plan.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <set>

#include "env/errors.hpp"

namespace leap::env {

std::string LaunchSpec::signature() const {
  std::string s;
  for (const auto& a : args) {
    switch (a.kind) {
      case ArgKind::tensor: s += 'p'; break;
      case ArgKind::int64: s += 'i'; break;
      case ArgKind::float32: s += 'f'; break;
      case ArgKind::float64: s += 'd'; break;
    }
  }
  return s;
}

std::vector<std::string> LaunchPlan::signatures() const {
  std::set<std::string> s;
  for (const auto& l : launches) s.insert(l.signature());
  return {s.begin(), s.end()};
}

namespace {

const std::set<std::string> kFunctions = {"ceil_div", "min", "max", "numel", "dim"};

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](unsigned char c) { return std::isalnum(c) || c == '_'; });
}

class PlanParser {
 public:
  PlanParser(const TaskInterface& task, const PlanParseOptions& opt) : task_(task), opt_(opt) {}

  LaunchPlan parse(std::string_view text) {
    check_size(text);
    try {
      return parse_checked(text);
    } catch (const YAML::BadConversion& e) {
      std::string where;
      if (e.mark.line >= 0) where = " (line " + std::to_string(e.mark.line + 1 + opt_.line_offset) + ")";
      throw FormatError("the launch plan has a list or mapping where a name is expected" + where);
    } catch (const YAML::Exception& e) {
      // yaml-cpp's own errors: syntax, its recursion guard, a key that is not a scalar.
      std::string where;
      if (e.mark.line >= 0)
        where = ": line " + std::to_string(e.mark.line + 1 + opt_.line_offset) + ", column " +
                std::to_string(e.mark.column + 1);
      throw FormatError("the launch plan is not valid YAML" + where + ": " + e.msg);
    }
  }

 private:
  // The limits that bound the YAML parser's work, checked before it runs.
  void check_size(std::string_view text) const {
    if (text.size() > kMaxPlanBytes)
      throw FormatError("the launch plan is " + std::to_string(text.size()) + " bytes; the limit is " +
                        std::to_string(kMaxPlanBytes) + " bytes");
    int depth = 0;
    int line = 1;
    for (char c : text) {
      if (c == '\n') ++line;
      if (c == '[' || c == '{') {
        if (++depth > kMaxPlanNesting)
          throw FormatError("the launch plan nests lists or mappings ('[', '{') deeper than " +
                            std::to_string(kMaxPlanNesting) + " levels (line " +
                            std::to_string(line + opt_.line_offset) + ")");
      } else if ((c == ']' || c == '}') && depth > 0) {
        --depth;
      }
    }
  }

  LaunchPlan parse_checked(std::string_view text) {
    YAML::Node root = YAML::Load(std::string(text));
    if (!root.IsMap())
      throw FormatError("the launch plan must be a YAML mapping with `launches:` (and optional "
                        "`scratch:`), got " + kind(root));
    for (const auto& kv : root) {
      std::string key = kv.first.as<std::string>();
      if (key != "launches" && key != "scratch")
        fail(kv.first, key, "unknown key (allowed at the top level: scratch, launches)");
    }
    LaunchPlan plan;
    if (auto s = root["scratch"]) parse_scratch(s, plan);
    auto l = root["launches"];
    if (!l) throw FormatError("the launch plan has no `launches:` list");
    if (l.IsNull() || (l.IsSequence() && l.size() == 0))
      fail(l, "launches", "the list of launches is empty: at least one launch is needed");
    if (!l.IsSequence()) fail(l, "launches", "must be a list of launches, got " + kind(l));
    if (l.size() > kMaxPlanLaunches)
      fail(l, "launches", "has " + std::to_string(l.size()) + " launches; the limit is " +
                              std::to_string(kMaxPlanLaunches));
    for (size_t i = 0; i < l.size(); ++i) plan.launches.push_back(parse_launch(l[i], i));
    return plan;
  }

  int line(const YAML::Node& n) const { return n.Mark().line + 1 + opt_.line_offset; }

  [[noreturn]] void fail(const YAML::Node& n, const std::string& path, const std::string& why) const {
    std::string where = path;
    if (n.Mark().line >= 0) where += " (line " + std::to_string(line(n)) + ")";
    throw FormatError("launch plan " + where + ": " + why);
  }

  static std::string kind(const YAML::Node& n) {
    switch (n.Type()) {
      case YAML::NodeType::Null: return "nothing";
      case YAML::NodeType::Scalar: return "'" + excerpt(n.Scalar()) + "'";
      case YAML::NodeType::Sequence: return "a list";
      case YAML::NodeType::Map: return "a mapping";
      default: return "an undefined value";
    }
  }

  bool is_scratch(const std::string& name) const {
    for (const auto& s : scratch_names_)
      if (s == name) return true;
    return false;
  }
  bool is_tensor(const std::string& name, bool allow_scratch) const {
    return task_.find_tensor(name) || (allow_scratch && is_scratch(name));
  }

  Expr parse_expr(const YAML::Node& n, const std::string& path, bool allow_scratch) const {
    if (!n.IsScalar()) fail(n, path, "expected an expression, got " + kind(n));
    return parse_expr_text(n, n.Scalar(), path, allow_scratch);
  }

  // At most 80 bytes of `text`, for a message (an over-long expression is not echoed whole).
  static std::string excerpt(const std::string& text) {
    return text.size() <= 80 ? text : text.substr(0, 77) + "...";
  }

  Expr parse_expr_text(const YAML::Node& n, const std::string& text, const std::string& path,
                       bool allow_scratch) const {
    Expr e;
    try {
      e = Expr::parse(text);
    } catch (const ExprError& err) {
      fail(n, path, "bad expression '" + excerpt(text) + "': column " + std::to_string(err.column()) +
                        ": " + err.reason());
    }
    auto names = e.names();
    for (const auto& s : names.symbols) {
      if (task_.sizes.count(s)) continue;
      if (auto c = task_.find_constant(s)) {
        if (c->type == ScalarType::int64) continue;
        fail(n, path, "in '" + text + "': '" + s +
                          "' is a floating-point constant; expressions are integer-only");
      }
      if (is_tensor(s, true))
        fail(n, path, "in '" + text + "': '" + s + "' is a tensor; use numel(" + s + ") or dim(" + s +
                          ", i) in an expression");
      fail(n, path, "in '" + text + "': unknown size symbol '" + s + "'" + known_sizes());
    }
    for (const auto& t : names.tensors) {
      if (is_tensor(t, allow_scratch)) continue;
      if (!allow_scratch && is_scratch(t))
        fail(n, path, "in '" + text + "': scratch shapes may use numel/dim of inputs and outputs only, not '" +
                          t + "'");
      fail(n, path, "in '" + text + "': unknown tensor '" + t + "'" + known_tensors());
    }
    return e;
  }

  std::string known_sizes() const {
    std::string s;
    for (const auto& [k, v] : task_.sizes) s += (s.empty() ? "" : ", ") + k;
    for (const auto& c : task_.constants)
      if (c.type == ScalarType::int64) s += (s.empty() ? "" : ", ") + c.name;
    return s.empty() ? " (the task has no size symbols)" : " (size symbols: " + s + ")";
  }
  std::string known_tensors() const {
    std::string s;
    for (const auto& t : task_.inputs) s += (s.empty() ? "" : ", ") + t.name;
    for (const auto& t : task_.outputs) s += (s.empty() ? "" : ", ") + t.name;
    for (const auto& t : scratch_names_) s += (s.empty() ? "" : ", ") + t;
    return " (tensors: " + s + ")";
  }

  // The scalar items of a list; a YAML flow list splits `[ceil_div(N, 256)]` at the comma, so
  // items are rejoined until their parentheses balance.
  std::vector<std::string> list_items(const YAML::Node& n, const std::string& path) const {
    std::vector<std::string> out;
    if (n.IsScalar()) {
      out.push_back(n.Scalar());
      return out;
    }
    if (!n.IsSequence()) fail(n, path, "expected a list, got " + kind(n));
    std::string cur;
    int depth = 0;
    for (size_t i = 0; i < n.size(); ++i) {
      if (!n[i].IsScalar())
        fail(n[i], path + "[" + std::to_string(out.size()) + "]",
             "expected a name or an expression, got " + kind(n[i]));
      const std::string& s = n[i].Scalar();
      cur += (depth > 0 ? ", " : "") + s;
      depth += static_cast<int>(std::count(s.begin(), s.end(), '(')) -
               static_cast<int>(std::count(s.begin(), s.end(), ')'));
      if (depth <= 0) {
        out.push_back(cur);
        cur.clear();
        depth = 0;
      }
    }
    if (!cur.empty()) out.push_back(cur);  // unbalanced: the expression parser reports it
    return out;
  }

  std::vector<Expr> parse_dims(const YAML::Node& n, const std::string& path) const {
    auto items = list_items(n, path);
    if (items.empty() || items.size() > 3)
      fail(n, path, "has " + std::to_string(items.size()) + " dimension" + (items.size() == 1 ? "" : "s") +
                        "; 1 to 3 expressions (x, y, z) are expected");
    std::vector<Expr> dims;
    for (size_t i = 0; i < items.size(); ++i)
      dims.push_back(parse_expr_text(n, items[i], path + "[" + std::to_string(i) + "]", true));
    return dims;
  }

  void parse_scratch(const YAML::Node& s, LaunchPlan& plan) {
    if (s.IsNull()) return;
    if (!s.IsMap()) fail(s, "scratch", "must map names to {dtype, shape}, got " + kind(s));
    if (s.size() > kMaxPlanScratch)
      fail(s, "scratch", "declares " + std::to_string(s.size()) + " buffers; the limit is " +
                             std::to_string(kMaxPlanScratch));
    for (const auto& kv : s) {
      std::string name = kv.first.as<std::string>();
      std::string path = "scratch." + name;
      if (!is_identifier(name)) fail(kv.first, path, "'" + name + "' is not a valid name");
      if (task_.find_tensor(name)) fail(kv.first, path, "'" + name + "' is already a task tensor");
      if (task_.sizes.count(name)) fail(kv.first, path, "'" + name + "' is already a size symbol");
      if (task_.find_constant(name)) fail(kv.first, path, "'" + name + "' is already a constant");
      if (kFunctions.count(name)) fail(kv.first, path, "'" + name + "' is a function name");
      if (is_scratch(name)) fail(kv.first, path, "declared twice");
      const YAML::Node& v = kv.second;
      if (!v.IsMap()) fail(v, path, "must be {dtype: ..., shape: [...]}, got " + kind(v));
      for (const auto& f : v) {
        std::string key = f.first.as<std::string>();
        if (key != "dtype" && key != "shape")
          fail(f.first, path + "." + key, "unknown key (allowed: dtype, shape)");
      }
      ScratchDecl d;
      d.name = name;
      d.line = line(kv.first);
      auto dt = v["dtype"];
      if (!dt) fail(v, path, "missing `dtype`");
      if (!dt.IsScalar() || !dtype_from_string(dt.Scalar(), d.dtype))
        fail(dt, path + ".dtype", "unknown dtype " + kind(dt) + " (known: " + dtype_names() + ")");
      auto sh = v["shape"];
      if (!sh) fail(v, path, "missing `shape` (a list of expressions; [] for one element)");
      if (!(sh.IsSequence() && sh.size() == 0)) {
        auto items = list_items(sh, path + ".shape");
        for (size_t i = 0; i < items.size(); ++i)
          d.shape.push_back(parse_expr_text(sh, items[i], path + ".shape[" + std::to_string(i) + "]", false));
      }
      plan.scratch.push_back(std::move(d));
      scratch_names_.push_back(name);
    }
  }

  LaunchSpec parse_launch(const YAML::Node& n, size_t index) const {
    std::string path = "launches[" + std::to_string(index) + "]";
    if (!n.IsMap())
      fail(n, path, "each launch must be a mapping with kernel, grid, block, args; got " + kind(n));
    for (const auto& f : n) {
      std::string key = f.first.as<std::string>();
      if (key != "kernel" && key != "grid" && key != "block" && key != "shared_bytes" && key != "args")
        fail(f.first, path + "." + key, "unknown key (allowed: kernel, grid, block, shared_bytes, args)");
    }
    LaunchSpec spec;
    spec.line = line(n);
    auto k = n["kernel"];
    if (!k) fail(n, path, "missing `kernel` (the extern \"C\" function to launch)");
    if (!k.IsScalar() || !is_identifier(k.Scalar()))
      fail(k, path + ".kernel", kind(k) + " is not a function name");
    spec.kernel = k.Scalar();
    for (const char* key : {"grid", "block"}) {
      auto d = n[key];
      std::vector<Expr>& dims = std::string(key) == "grid" ? spec.grid : spec.block;
      if (!d) {
        if (opt_.require_grid_block) fail(n, path, std::string("missing `") + key + "` (1 to 3 expressions)");
        dims.push_back(Expr::literal(1));
      } else {
        dims = parse_dims(d, path + "." + key);
      }
    }
    if (auto sb = n["shared_bytes"])
      spec.shared_bytes = parse_expr(sb, path + ".shared_bytes", true);
    else
      spec.shared_bytes = Expr::literal(0);
    auto args = n["args"];
    if (!args) fail(n, path, "missing `args` (the kernel's arguments in order; [] for none)");
    if (!(args.IsSequence() && args.size() == 0)) {
      if (!args.IsSequence()) fail(args, path + ".args", "must be a list, got " + kind(args));
      if (args.size() > kMaxLaunchArgs)
        fail(args, path + ".args", "has " + std::to_string(args.size()) + " arguments; the limit is " +
                                       std::to_string(kMaxLaunchArgs));
      auto items = list_items(args, path + ".args");
      for (size_t i = 0; i < items.size(); ++i) {
        std::string apath = path + ".args[" + std::to_string(i) + "]";
        PlanArg a;
        a.text = items[i];
        std::string t = items[i];
        t.erase(0, t.find_first_not_of(" \t"));
        t.erase(t.find_last_not_of(" \t") + 1);
        if (is_identifier(t) && is_tensor(t, true)) {
          a.kind = ArgKind::tensor;
          a.name = t;
        } else if (auto c = is_identifier(t) ? task_.find_constant(t) : nullptr) {
          a.kind = c->type == ScalarType::float32   ? ArgKind::float32
                   : c->type == ScalarType::float64 ? ArgKind::float64
                                                    : ArgKind::int64;
          a.name = t;
          if (a.kind == ArgKind::int64) a.expr = Expr::parse(t);
        } else {
          a.kind = ArgKind::int64;
          a.expr = parse_expr_text(args, t, apath, true);
        }
        spec.args.push_back(std::move(a));
      }
    }
    return spec;
  }

  const TaskInterface& task_;
  const PlanParseOptions& opt_;
  std::vector<std::string> scratch_names_;
};

}  // namespace

LaunchPlan parse_launch_plan(std::string_view yaml, const TaskInterface& task,
                             const PlanParseOptions& options) {
  return PlanParser(task, options).parse(yaml);
}

}  // namespace leap::env
