#include "config/load.hpp"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "config/schema.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"

namespace leap::config {
namespace {

/// Where a value came from, for error messages: "file:line:col" or "--set k=v".
struct Where {
  std::string text;
};

Where at(const std::string& source, const YAML::Mark& m) {
  if (m.is_null()) return {source};
  return {fmt::format("{}:{}:{}", source, m.line + 1, m.column + 1)};
}

[[noreturn]] void fail(const Where& w, const std::string& key, const std::string& msg) {
  if (key.empty()) throw ConfigError(fmt::format("{}: {}", w.text, msg));
  throw ConfigError(fmt::format("{}: key '{}': {}", w.text, key, msg));
}

std::string show(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar: return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Null: return "nothing";
    default: return "an undefined value";
  }
}

bool is_section(const std::string& path) {
  for (const auto& f : schema())
    if (f.path.size() > path.size() && f.path.compare(0, path.size(), path) == 0 && f.path[path.size()] == '.')
      return true;
  return false;
}

std::optional<bool> parse_bool(const std::string& s) {
  if (s == "true" || s == "True" || s == "TRUE" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "False" || s == "FALSE" || s == "no" || s == "off") return false;
  return std::nullopt;
}

std::optional<int64_t> parse_int(const std::string& s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

std::optional<double> parse_double(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

void check_range(const Field& f, double v, const Where& w) {
  bool low_bad = f.min && (f.min_exclusive ? v <= *f.min : v < *f.min);
  bool high_bad = f.max && v > *f.max;
  if (low_bad || high_bad) fail(w, f.path, fmt::format("{} is out of range: expected {}", v, describe_type(f)));
}

void check_choice(const Field& f, const std::string& v, const Where& w) {
  for (const auto& c : f.choices)
    if (c == v) return;
  fail(w, f.path, fmt::format("'{}' is not allowed: expected {}", v, describe_type(f)));
}

/// Converts one scalar item of the field's element type; returns false on a type mismatch.
template <class T>
T scalar_as(const Field& f, const YAML::Node& n, const Where& w) {
  if (!n.IsScalar()) fail(w, f.path, fmt::format("expected {}, got {}", describe_type(f), show(n)));
  const std::string& s = n.Scalar();
  if constexpr (std::is_same_v<T, bool>) {
    auto v = parse_bool(s);
    if (!v) fail(w, f.path, fmt::format("expected true or false, got '{}'", s));
    return *v;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    auto v = parse_int(s);
    if (!v) fail(w, f.path, fmt::format("expected {}, got '{}'", describe_type(f), s));
    check_range(f, static_cast<double>(*v), w);
    return *v;
  } else if constexpr (std::is_same_v<T, double>) {
    auto v = parse_double(s);
    if (!v) fail(w, f.path, fmt::format("expected {}, got '{}'", describe_type(f), s));
    check_range(f, *v, w);
    return *v;
  } else {
    if (!f.choices.empty()) check_choice(f, s, w);
    return s;
  }
}

template <class T>
std::vector<T> list_as(const Field& f, const YAML::Node& n, const std::string& source, const Where& w) {
  if (!n.IsSequence()) fail(w, f.path, fmt::format("expected {}, got {}", describe_type(f), show(n)));
  std::vector<T> out;
  for (const auto& item : n) {
    Where iw = source.empty() ? w : at(source, item.Mark());
    out.push_back(scalar_as<T>(f, item, iw));
  }
  return out;
}

/// Sets field `f` of `exp` from node `n`. `source` is the file (for per-item marks) or "".
void set_field(Experiment& exp, const Field& f, const YAML::Node& n, const std::string& source, const Where& w) {
  if (n.IsNull() && f.type != FieldType::String)
    fail(w, f.path, fmt::format("missing value: expected {}", describe_type(f)));
  void* p = f.ref(exp);
  switch (f.type) {
    case FieldType::Bool: *static_cast<bool*>(p) = scalar_as<bool>(f, n, w); break;
    case FieldType::Int: *static_cast<int64_t*>(p) = scalar_as<int64_t>(f, n, w); break;
    case FieldType::Double: *static_cast<double*>(p) = scalar_as<double>(f, n, w); break;
    case FieldType::String:
      if (n.IsNull()) {
        *static_cast<std::string*>(p) = "";
        break;
      }
      [[fallthrough]];
    case FieldType::Enum: *static_cast<std::string*>(p) = scalar_as<std::string>(f, n, w); break;
    case FieldType::IntList: *static_cast<std::vector<int64_t>*>(p) = list_as<int64_t>(f, n, source, w); break;
    case FieldType::DoubleList: *static_cast<std::vector<double>*>(p) = list_as<double>(f, n, source, w); break;
    case FieldType::EnumList:
      *static_cast<std::vector<std::string>*>(p) = list_as<std::string>(f, n, source, w);
      break;
  }
}

std::string unknown_key_message(const std::string& path) {
  std::string hint = suggest_key(path);
  if (!hint.empty()) return fmt::format("unknown key (did you mean '{}'?)", hint);
  return "unknown key (configs/reference.yaml lists every key)";
}

void walk(Experiment& exp, const YAML::Node& map, const std::string& prefix, const std::string& source,
          std::map<std::string, Where>& seen) {
  for (auto it = map.begin(); it != map.end(); ++it) {
    const YAML::Node& key = it->first;
    Where w = at(source, key.Mark());
    if (!key.IsScalar()) fail(w, prefix, "keys must be plain names");
    std::string path = prefix.empty() ? key.Scalar() : prefix + "." + key.Scalar();
    if (seen.count(path)) fail(w, path, "duplicate key");
    seen[path] = w;
    if (const Field* f = find_field(path)) {
      set_field(exp, *f, it->second, source, at(source, it->second.Mark().is_null() ? key.Mark() : it->second.Mark()));
    } else if (is_section(path)) {
      if (it->second.IsNull()) continue;  // an empty section keeps its defaults
      if (!it->second.IsMap()) fail(at(source, it->second.Mark()), path, fmt::format("expected a mapping (a section), got {}", show(it->second)));
      walk(exp, it->second, path, source, seen);
    } else {
      fail(w, path, unknown_key_message(path));
    }
  }
}

YAML::Node load_yaml(const std::string& text, const std::string& source) {
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}: YAML syntax error: {}", at(source, e.mark).text, e.msg));
  }
}

void collect_leaves(const YAML::Node& n, const std::string& prefix, std::vector<std::string>& out) {
  for (auto it = n.begin(); it != n.end(); ++it) {
    std::string path = prefix.empty() ? it->first.Scalar() : prefix + "." + it->first.Scalar();
    if (it->second.IsMap()) collect_leaves(it->second, path, out);
    else out.push_back(path);
  }
}

void emit_value(YAML::Emitter& out, const Field& f, Experiment& exp) {
  void* p = f.ref(exp);
  switch (f.type) {
    case FieldType::Bool: out << *static_cast<bool*>(p); break;
    case FieldType::Int: out << *static_cast<int64_t*>(p); break;
    case FieldType::Double: out << fmt::format("{}", *static_cast<double*>(p)); break;
    case FieldType::String:
    case FieldType::Enum: out << YAML::DoubleQuoted << *static_cast<std::string*>(p); break;
    case FieldType::IntList: out << YAML::Flow << *static_cast<std::vector<int64_t>*>(p); break;
    case FieldType::DoubleList: {
      out << YAML::Flow << YAML::BeginSeq;
      for (double d : *static_cast<std::vector<double>*>(p)) out << fmt::format("{}", d);
      out << YAML::EndSeq;
      break;
    }
    case FieldType::EnumList: out << YAML::Flow << *static_cast<std::vector<std::string>*>(p); break;
  }
}

}  // namespace

void apply_override(Experiment& exp, const std::string& kv) {
  Where w{"--set " + kv};
  auto eq = kv.find('=');
  if (eq == std::string::npos || eq == 0) fail(w, "", "expected key.path=value");
  std::string path = kv.substr(0, eq);
  std::string value = kv.substr(eq + 1);
  const Field* f = find_field(path);
  if (!f) {
    if (is_section(path)) fail(w, path, "is a section: set one of its keys, e.g. " + path + ".<key>=value");
    fail(w, path, unknown_key_message(path));
  }
  YAML::Node n;
  if (f->type == FieldType::String) {
    n = YAML::Node(value);  // taken verbatim: a path or flags string needs no YAML quoting
  } else {
    try {
      n = YAML::Load(value);
    } catch (const YAML::Exception& e) {
      fail(w, path, "value is not valid YAML: " + e.msg);
    }
  }
  set_field(exp, *f, n, "", w);
}

namespace {
/// Cross-key checks; `locate(key)` gives where the key was set (file:line:col when known).
void validate_at(const Experiment& e, const std::function<Where(const std::string&)>& locate) {
  if (e.dcp.min_fail_ratio > e.dcp.max_fail_ratio)
    fail(locate("dcp.min_fail_ratio"), "dcp.min_fail_ratio",
         fmt::format("{} is greater than dcp.max_fail_ratio ({}): no group could ever be expanded",
                     e.dcp.min_fail_ratio, e.dcp.max_fail_ratio));
  if (e.loss.eps_low >= 1.0) fail(locate("loss.eps_low"), "loss.eps_low", "must be below 1 (the ratio's lower clip 1 - eps_low must stay positive)");
  if (e.compaction.enabled && e.compaction.strategy == "summary" &&
      e.compaction.summary_max_tokens >= e.compaction.max_prompt_tokens)
    fail(locate("compaction.summary_max_tokens"), "compaction.summary_max_tokens", "must be smaller than compaction.max_prompt_tokens");
  if (e.eval.fast_p.empty()) fail(locate("eval.fast_p"), "eval.fast_p", "needs at least one threshold");
  if (e.turns.max_env_calls > 0 && e.turns.max > 1 && e.turns.max_env_calls <= e.rollout.group_size)
    fail(locate("turns.max_env_calls"), "turns.max_env_calls",
         fmt::format("{} leaves no env call for a debugging turn: turn 1 alone takes rollout.group_size ({}) per "
                     "group; use 0 (no cap) or more than {}",
                     e.turns.max_env_calls, e.rollout.group_size, e.rollout.group_size));
  // Node-level (tree) scoring has no first-success turn per rollout to rank on.
  if (tree_scoring(e) && e.reward.kind == "rank") {
    const std::string key = e.turns.branch > 1 ? "turns.branch" : e.reward.tree != "none" ? "reward.tree" : "advantage.kind";
    fail(locate(key), key,
         "scores each turn as a node of a debugging tree (as turns.branch > 1, reward.tree and advantage.kind sae* "
         "do), which the rank tournament (reward.kind: rank, on each rollout's first-success turn) does not define; "
         "use reward.kind binary, speedup or kernelgym");
  }
  std::set<std::string> keys(e.reward.rank_keys.begin(), e.reward.rank_keys.end());
  if (keys.size() != e.reward.rank_keys.size()) fail(locate("reward.rank_keys"), "reward.rank_keys", "lists a key twice");
  if (e.train.sft.teacher_error > 0 && e.train.sft.mutant_kinds.empty())
    fail(locate("train.sft.teacher_error"), "train.sft.teacher_error",
         "needs train.sft.mutant_kinds: the kinds of edit the teacher always makes");
  if (e.model.path.empty()) fail(locate("model.path"), "model.path", "must name a checkpoint folder");
  if (e.tasks.dir.empty()) fail(locate("tasks.dir"), "tasks.dir", "must name a task-set folder");
}
}  // namespace

bool tree_scoring(const Experiment& exp) {
  return exp.turns.branch > 1 || exp.reward.tree != "none" || exp.advantage.kind == "sae" ||
         exp.advantage.kind == "sae_projection";
}

void validate(const Experiment& e, const std::string& source) {
  validate_at(e, [&](const std::string&) { return Where{source}; });
}

Experiment parse_experiment(const std::string& text, const std::string& source,
                            const std::vector<std::string>& overrides) {
  Experiment exp;
  YAML::Node root = load_yaml(text, source);
  std::map<std::string, Where> seen;
  if (root.IsMap()) {
    walk(exp, root, "", source, seen);
  } else if (!root.IsNull()) {
    fail(at(source, root.Mark()), "", fmt::format("expected a mapping of sections at the top, got {}", show(root)));
  }
  for (const auto& kv : overrides) {
    apply_override(exp, kv);
    seen[kv.substr(0, kv.find('='))] = Where{"--set " + kv};
  }
  validate_at(exp, [&](const std::string& key) {
    auto it = seen.find(key);
    return it != seen.end() ? it->second : Where{source};
  });
  return exp;
}

Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw ConfigError(fmt::format("{}: is a folder, not a config file (give an experiment YAML, e.g. "
                                  "configs/quickstart.yaml)", path));
  std::ifstream in(path);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the config file", path));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ConfigError(fmt::format("{}: cannot read the config file", path));
  const std::string text = ss.str();
  // Nothing but blanks and comments: almost surely a wrong or truncated file, not "all defaults".
  bool content = false;
  std::istringstream lines(text);
  for (std::string line; !content && std::getline(lines, line);) {
    const size_t first = line.find_first_not_of(" \t\r");
    content = first != std::string::npos && line[first] != '#';
  }
  if (!content)
    throw ConfigError(fmt::format("{}: the config file is empty (no keys; write at least the keys that differ "
                                  "from the defaults, see configs/reference.yaml)", path));
  return parse_experiment(text, path, overrides);
}

Experiment resolved(const Experiment& exp) {
  Experiment out = exp;
  if (out.loss.aggregation == "auto") out.loss.aggregation = out.compaction.enabled ? "segment_mean" : "token_mean";
  return out;
}

std::string to_yaml(const Experiment& exp_in, bool comments) {
  Experiment exp = exp_in;  // Field::ref needs a mutable object
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;  // currently open section path components
  for (const auto& f : schema()) {
    std::vector<std::string> parts;
    std::stringstream ps(f.path);
    for (std::string part; std::getline(ps, part, '.');) parts.push_back(part);
    std::vector<std::string> sections(parts.begin(), parts.end() - 1);
    size_t common = 0;
    while (common < open.size() && common < sections.size() && open[common] == sections[common]) ++common;
    while (open.size() > common) {
      out << YAML::EndMap;
      open.pop_back();
    }
    for (size_t i = common; i < sections.size(); ++i) {
      out << YAML::Key << sections[i] << YAML::Value << YAML::BeginMap;
      open.push_back(sections[i]);
    }
    out << YAML::Key << parts.back() << YAML::Value;
    emit_value(out, f, exp);
    if (comments) out << YAML::Comment(f.doc);
  }
  while (!open.empty()) {
    out << YAML::EndMap;
    open.pop_back();
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string config_hash(const Experiment& exp) { return util::hash_hex(to_yaml(exp)); }

std::vector<std::string> leaf_keys(const std::string& text, const std::string& source) {
  YAML::Node root = load_yaml(text, source);
  std::vector<std::string> out;
  if (root.IsMap()) collect_leaves(root, "", out);
  return out;
}

void require_input_folders(const Experiment& exp, const std::string& source) {
  if (!std::filesystem::is_directory(exp.model.path))
    throw ConfigError(source + ": key 'model.path': no model folder '" + exp.model.path +
                      "' (create the tiny one with: leap model init --preset tiny --out " + exp.model.path + ")");
  if (!std::filesystem::is_directory(exp.tasks.dir))
    throw ConfigError(source + ": key 'tasks.dir': no task folder '" + exp.tasks.dir + "'");
  if (!exp.kb.dir.empty() && !std::filesystem::is_directory(exp.kb.dir))
    throw ConfigError(source + ": key 'kb.dir': no knowledge-base folder '" + exp.kb.dir + "'");
}

}  // namespace leap::config
