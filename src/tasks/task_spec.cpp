#include "tasks/task_spec.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "util/error.hpp"
#include "util/hash.hpp"

namespace leap::tasks {

namespace fs = std::filesystem;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Error helper bound to one file.
struct Ctx {
  std::string file;
  [[noreturn]] void fail(const YAML::Node& at, const std::string& key, const std::string& msg) const {
    std::string where = file;
    if (at.IsDefined() && at.Mark().line >= 0)
      where += ":" + std::to_string(at.Mark().line + 1) + ":" + std::to_string(at.Mark().column + 1);
    throw ConfigError(where + ": " + (key.empty() ? "" : key + ": ") + msg);
  }
  [[noreturn]] void fail_line(int line, const std::string& key, const std::string& msg) const {
    throw ConfigError(file + (line > 0 ? ":" + std::to_string(line) : "") + ": " + key + ": " + msg);
  }
  void check_keys(const YAML::Node& map, const std::string& path, const std::set<std::string>& allowed) const {
    if (!map.IsMap()) fail(map, path, "expected a mapping");
    for (auto it = map.begin(); it != map.end(); ++it) {
      std::string k = it->first.as<std::string>();
      if (!allowed.count(k)) {
        std::string names;
        for (const auto& a : allowed) names += (names.empty() ? "" : ", ") + a;
        fail(it->first, path.empty() ? k : path + "." + k, "unknown key '" + k + "' (expected one of: " + names + ")");
      }
    }
  }
  std::string str(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail(n, key, "expected a string");
    return n.as<std::string>();
  }
  double num(const YAML::Node& n, const std::string& key) const {
    if (!n.IsScalar()) fail(n, key, "expected a number");
    try {
      size_t used = 0;
      std::string s = n.as<std::string>();
      double v = std::stod(s, &used);
      if (used != s.size()) throw std::invalid_argument(s);
      return v;
    } catch (const std::exception&) {
      fail(n, key, "expected a number, got '" + n.as<std::string>() + "'");
    }
  }
  int64_t integer(const YAML::Node& n, const std::string& key) const {
    double v = num(n, key);
    if (v != std::floor(v) || std::abs(v) > 9.0e15) fail(n, key, "expected an integer");
    return static_cast<int64_t>(v);
  }
};

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

/// Identifiers of a shape expression that are not function names.
std::vector<std::string> shape_symbols(const std::string& expr) {
  static const std::set<std::string> funcs = {"ceil_div", "min", "max"};
  std::vector<std::string> out;
  for (size_t i = 0; i < expr.size();) {
    if (is_ident_start(expr[i])) {
      size_t j = i;
      while (j < expr.size() && is_ident_char(expr[j])) ++j;
      std::string id = expr.substr(i, j - i);
      if (!funcs.count(id)) out.push_back(id);
      i = j;
    } else if (std::isdigit(static_cast<unsigned char>(expr[i]))) {
      while (i < expr.size() && is_ident_char(expr[i])) ++i;
    } else {
      ++i;
    }
  }
  return out;
}

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  try {
    size_t used = 0;
    std::stod(s, &used);
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

std::map<std::string, int64_t> parse_sizes(const Ctx& c, const YAML::Node& n, const std::string& key,
                                           std::vector<std::pair<std::string, int64_t>>* ordered) {
  if (!n.IsMap()) c.fail(n, key, "expected a mapping of size symbols to positive integers, e.g. {B: 64, N: 4096}");
  std::map<std::string, int64_t> out;
  for (auto it = n.begin(); it != n.end(); ++it) {
    std::string k = it->first.as<std::string>();
    if (k.empty() || !is_ident_start(k[0]) || !std::all_of(k.begin(), k.end(), is_ident_char))
      c.fail(it->first, key + "." + k, "a size symbol must be an identifier");
    int64_t v = c.integer(it->second, key + "." + k);
    if (v < 1) c.fail(it->second, key + "." + k, "a size must be a positive integer");
    out[k] = v;
    if (ordered) ordered->emplace_back(k, v);
  }
  return out;
}

InitSpec parse_init(const Ctx& c, const YAML::Node& n, const std::string& key, const std::set<std::string>& symbols,
                    const fs::path& task_dir) {
  InitSpec s;
  c.check_keys(n, key, {"normal", "uniform", "randint", "file", "strict", "seed"});
  int kinds = 0;
  for (auto it = n.begin(); it != n.end(); ++it) {
    std::string k = it->first.as<std::string>();
    if (k == "file") {
      ++kinds;
      fs::path f = c.str(it->second, key + ".file");
      if (f.empty()) c.fail(it->second, key + ".file", "empty file name");
      if (f.is_relative()) f = task_dir / f;
      if (!fs::is_regular_file(f)) c.fail(it->second, key + ".file", "no such file: " + f.string());
      s.kind = InitSpec::Kind::file;
      s.file = f.string();
      continue;
    }
    if (k == "seed") {
      const std::string t = it->second.IsScalar() ? it->second.Scalar() : "";
      if (t.empty() || t.size() > 18 || t.find_first_not_of("0123456789") != std::string::npos)
        c.fail(it->second, key + ".seed", "expected a non-negative integer");
      s.seed = std::stoull(t);
      continue;
    }
    if (k == "strict") {
      if (!it->second.IsScalar()) c.fail(it->second, key + ".strict", "expected true or false");
      try {
        s.strict = it->second.as<bool>();
      } catch (const std::exception&) {
        c.fail(it->second, key + ".strict", "expected true or false");
      }
      continue;
    }
    ++kinds;
    const std::string pk = key + "." + k;
    std::string pa = k == "normal" ? "mean" : "low", pb = k == "normal" ? "std" : "high";
    c.check_keys(it->second, pk, {pa, pb});
    s.kind = k == "normal" ? InitSpec::Kind::normal : k == "uniform" ? InitSpec::Kind::uniform : InitSpec::Kind::randint;
    for (const auto& [pname, dest] : {std::pair{pa, &s.a}, std::pair{pb, &s.b}}) {
      YAML::Node v = it->second[pname];
      if (!v) c.fail(it->second, pk, "missing '" + pname + "'");
      std::string t = c.str(v, pk + "." + pname);
      if (!is_number(t) && !symbols.count(t))
        c.fail(v, pk + "." + pname, "expected a number or a size symbol, got '" + t + "'");
      *dest = t;
    }
    if (is_number(s.a) && is_number(s.b)) {
      double a = std::stod(s.a), b = std::stod(s.b);
      if (s.kind == InitSpec::Kind::normal && b < 0) c.fail(it->second, pk + ".std", "std must be >= 0");
      if (s.kind != InitSpec::Kind::normal && !(b > a)) c.fail(it->second, pk, "high must be greater than low");
    }
  }
  if (kinds != 1)
    c.fail(n, key, "give exactly one distribution: normal {mean, std}, uniform {low, high}, randint {low, high} "
                   "or file (fixed values)");
  if (s.seed) {
    if (s.kind != InitSpec::Kind::normal && s.kind != InitSpec::Kind::uniform)
      c.fail(n, key + ".seed", "a seed (fixed values) needs a normal or uniform distribution");
    if (!is_number(s.a) || !is_number(s.b))
      c.fail(n, key + ".seed", "fixed values need numeric distribution parameters, not size symbols");
    s.strict = true;
  }
  return s;
}

TensorSpec parse_tensor(const Ctx& c, const std::string& name, const YAML::Node& n, const std::string& key,
                        const std::set<std::string>& symbols, bool input, const fs::path& task_dir) {
  TensorSpec t;
  t.name = name;
  t.line = n.Mark().line + 1;
  if (!is_ident_start(name[0]) || !std::all_of(name.begin(), name.end(), is_ident_char))
    c.fail(n, key, "a tensor name must be an identifier");
  if (input)
    c.check_keys(n, key, {"dtype", "shape", "init"});
  else
    c.check_keys(n, key, {"dtype", "shape"});
  if (!n["dtype"]) c.fail(n, key, "missing 'dtype'");
  std::string dt = c.str(n["dtype"], key + ".dtype");
  if (!canonical_dtype(dt, t.dtype))
    c.fail(n["dtype"], key + ".dtype",
           "unknown dtype '" + dt + "' (expected one of: float16, bfloat16, float32, float64, int8, uint8, "
           "int16, int32, int64, bool)");
  if (!n["shape"]) c.fail(n, key, "missing 'shape' (use [] for a 0-d tensor)");
  YAML::Node sh = n["shape"];
  if (!sh.IsSequence()) c.fail(sh, key + ".shape", "expected a list of dims, e.g. [B, N]");
  for (size_t i = 0; i < sh.size(); ++i) {
    std::string e = c.str(sh[i], key + ".shape[" + std::to_string(i) + "]");
    for (const auto& s : shape_symbols(e))
      if (!symbols.count(s)) {
        std::string names;
        for (const auto& x : symbols) names += (names.empty() ? "" : ", ") + x;
        c.fail(sh[i], key + ".shape[" + std::to_string(i) + "]",
               "unknown size symbol '" + s + "' (sizes defines: " + (names.empty() ? "none" : names) + ")");
      }
    t.shape.push_back(e);
  }
  if (input && n["init"]) t.init = parse_init(c, n["init"], key + ".init", symbols, task_dir);
  return t;
}

}  // namespace

double InitSpec::value(const std::string& p, const std::map<std::string, int64_t>& sizes) {
  if (is_number(p)) return std::stod(p);
  auto it = sizes.find(p);
  if (it == sizes.end()) throw Error("init parameter '" + p + "' is neither a number nor a size symbol");
  return static_cast<double>(it->second);
}

std::string InitSpec::kind_name() const {
  switch (kind) {
    case Kind::normal: return "normal";
    case Kind::uniform: return "uniform";
    case Kind::randint: return "randint";
    case Kind::file: return "file";
    case Kind::none: break;
  }
  return "default";
}

bool canonical_dtype(const std::string& text, std::string& out) {
  static const std::map<std::string, std::string> names = {
      {"float16", "float16"}, {"half", "float16"},   {"fp16", "float16"},   {"bfloat16", "bfloat16"},
      {"bf16", "bfloat16"},   {"float32", "float32"}, {"float", "float32"},  {"fp32", "float32"},
      {"float64", "float64"}, {"double", "float64"}, {"fp64", "float64"},   {"int8", "int8"},
      {"uint8", "uint8"},     {"int16", "int16"},    {"int32", "int32"},    {"int", "int32"},
      {"int64", "int64"},     {"long", "int64"},     {"bool", "bool"}};
  auto it = names.find(text);
  if (it == names.end()) return false;
  out = it->second;
  return true;
}

std::map<std::string, int64_t> TaskSpec::sizes_for(const std::string& backend) const {
  std::map<std::string, int64_t> out(sizes.begin(), sizes.end());
  auto it = size_overrides.find(backend);
  if (it != size_overrides.end())
    for (const auto& [k, v] : it->second) out[k] = v;
  return out;
}

const TensorSpec* TaskSpec::find_tensor(const std::string& n) const {
  for (const auto& t : inputs)
    if (t.name == n) return &t;
  for (const auto& t : outputs)
    if (t.name == n) return &t;
  return nullptr;
}

TaskSpec load_task(const std::string& path_in) {
  fs::path path = path_in;
  if (fs::is_directory(path)) path /= "task.yaml";
  Ctx c{path.string()};
  if (!fs::exists(path)) throw ConfigError(c.file + ": no such task file");
  std::string text = read_text(c.file);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(c.file + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) +
                      ": YAML syntax error: " + e.msg);
  }
  if (!root.IsMap()) c.fail(root, "", "a task file must be a mapping");
  c.check_keys(root, "", {"name", "level", "category", "prompt", "sizes", "sizes_cpu", "sizes_cuda", "inputs",
                          "outputs", "constants", "reference", "tolerance", "description", "source"});
  TaskSpec t;
  t.file = c.file;
  t.dir = path.parent_path().string();
  t.name = root["name"] ? c.str(root["name"], "name") : path.parent_path().filename().string();
  if (t.name.empty()) c.fail(root, "name", "empty task name");
  if (root["level"]) t.level = c.integer(root["level"], "level");
  if (root["category"]) t.category = c.str(root["category"], "category");
  if (root["prompt"]) t.prompt = c.str(root["prompt"], "prompt");
  if (!root["sizes"]) c.fail(root, "sizes", "missing 'sizes' (the size symbols, e.g. {N: 4096})");
  std::map<std::string, int64_t> defaults = parse_sizes(c, root["sizes"], "sizes", &t.sizes);
  std::set<std::string> symbols;
  for (const auto& [k, v] : defaults) symbols.insert(k);
  for (const std::string backend : {"cpu", "cuda"}) {
    const std::string key = "sizes_" + backend;
    if (!root[key]) continue;
    if (root[key].IsScalar() && root[key].as<std::string>() == "none") {  // reason filled in from source: below
      t.no_sizes[backend] = key + ": none";
      continue;
    }
    auto o = parse_sizes(c, root[key], key, nullptr);
    for (auto it = root[key].begin(); it != root[key].end(); ++it) {
      std::string k = it->first.as<std::string>();
      if (!symbols.count(k)) c.fail(it->first, key + "." + k, "'" + k + "' is not a symbol of 'sizes'");
    }
    t.size_overrides[backend] = o;
  }

  std::set<std::string> tensor_names;
  for (const char* section : {"inputs", "outputs"}) {
    const bool input = std::string(section) == "inputs";
    YAML::Node n = root[section];
    if (!n) c.fail(root, section, std::string("missing '") + section + "'");
    if (!n.IsMap() || n.size() == 0)
      c.fail(n, section, "expected a non-empty mapping of tensor name -> {dtype, shape" + std::string(input ? ", init}" : "}"));
    for (auto it = n.begin(); it != n.end(); ++it) {
      std::string name = it->first.as<std::string>();
      std::string key = std::string(section) + "." + name;
      if (symbols.count(name)) c.fail(it->first, key, "'" + name + "' is already a size symbol");
      if (!tensor_names.insert(name).second) c.fail(it->first, key, "duplicate tensor name '" + name + "'");
      (input ? t.inputs : t.outputs).push_back(parse_tensor(c, name, it->second, key, symbols, input, path.parent_path()));
    }
  }
  if (root["constants"]) {
    YAML::Node n = root["constants"];
    if (!n.IsMap()) c.fail(n, "constants", "expected a mapping of name -> number (or {value, dtype})");
    for (auto it = n.begin(); it != n.end(); ++it) {
      ConstantSpec k;
      k.name = it->first.as<std::string>();
      std::string key = "constants." + k.name;
      if (symbols.count(k.name) || tensor_names.count(k.name))
        c.fail(it->first, key, "'" + k.name + "' is already a size symbol or tensor");
      if (it->second.IsMap()) {
        c.check_keys(it->second, key, {"value", "dtype"});
        if (!it->second["value"]) c.fail(it->second, key, "missing 'value'");
        k.value = c.num(it->second["value"], key + ".value");
        if (it->second["dtype"]) {
          std::string d;
          canonical_dtype(c.str(it->second["dtype"], key + ".dtype"), d);
          if (d != "float32" && d != "float64" && d != "int64")
            c.fail(it->second["dtype"], key + ".dtype", "a constant's dtype must be float32, float64 or int64");
          k.dtype = d;
        }
      } else {
        k.value = c.num(it->second, key);
      }
      t.constants.push_back(k);
    }
  }
  if (root["source"]) {
    YAML::Node n = root["source"];
    if (!n.IsMap()) c.fail(n, "source", "expected a mapping of provenance keys to scalars (benchmark, level, problem_id, ...)");
    for (auto it = n.begin(); it != n.end(); ++it) {
      std::string k = it->first.as<std::string>();
      if (!it->second.IsScalar()) c.fail(it->second, "source." + k, "expected a scalar");
      t.source[k] = it->second.as<std::string>();
    }
  }
  for (auto& [backend, why] : t.no_sizes)
    if (auto s = t.source.find(backend + "_sizes"); s != t.source.end()) why += " (" + s->second + ")";
  std::string hash_input = text;
  for (const auto& in : t.inputs)
    if (in.init.kind == InitSpec::Kind::file) hash_input += read_text(in.init.file);
  YAML::Node ref = root["reference"];
  if (!ref) c.fail(root, "reference", "missing 'reference' (torchscript: source, or file: reference.pt)");
  c.check_keys(ref, "reference", {"torchscript", "file"});
  t.reference.line = ref.Mark().line + 1;
  if (ref["torchscript"] && ref["file"]) c.fail(ref, "reference", "give either 'torchscript' or 'file', not both");
  if (ref["torchscript"]) {
    t.reference.torchscript = c.str(ref["torchscript"], "reference.torchscript");
    if (t.reference.torchscript.find("def reference") == std::string::npos)
      c.fail(ref["torchscript"], "reference.torchscript", "the source must define 'def reference(...)'");
  } else if (ref["file"]) {
    fs::path f = c.str(ref["file"], "reference.file");
    if (f.is_relative()) f = path.parent_path() / f;
    if (!fs::exists(f)) c.fail(ref["file"], "reference.file", "no such file: " + f.string());
    t.reference.file = f.string();
    hash_input += read_text(f.string());
  } else {
    c.fail(ref, "reference", "missing 'torchscript' or 'file'");
  }
  if (root["tolerance"]) {
    YAML::Node n = root["tolerance"];
    c.check_keys(n, "tolerance", {"atol", "rtol"});
    if (n["atol"]) t.tolerance.atol = c.num(n["atol"], "tolerance.atol");
    if (n["rtol"]) t.tolerance.rtol = c.num(n["rtol"], "tolerance.rtol");
    if (t.tolerance.atol < 0 || t.tolerance.rtol < 0 || t.tolerance.rtol >= 0.5)
      c.fail(n, "tolerance", "atol must be >= 0 and rtol in [0, 0.5)");
  }
  t.hash = util::hash_hex(hash_input);
  return t;
}

const TaskSpec* TaskSet::find(const std::string& n) const {
  for (const auto& t : tasks)
    if (t.name == n) return &t;
  return nullptr;
}

std::string TaskSet::split_of(const std::string& n) const {
  bool tr = std::find(train.begin(), train.end(), n) != train.end();
  bool ev = std::find(eval.begin(), eval.end(), n) != eval.end();
  return tr && ev ? "train+eval" : tr ? "train" : ev ? "eval" : "";
}

std::vector<const TaskSpec*> TaskSet::split(const std::string& s) const {
  std::vector<const TaskSpec*> out;
  if (s == "all") {
    for (const auto& t : tasks) out.push_back(&t);
    return out;
  }
  if (s != "train" && s != "eval") throw Error("unknown split '" + s + "' (expected train, eval or all)");
  for (const auto& n : s == "train" ? train : eval)
    if (const TaskSpec* t = find(n)) out.push_back(t);
  return out;
}

namespace {
TaskSet load_set(const std::string& dir, std::vector<std::string>* errors);
}  // namespace

TaskSet load_task_set(const std::string& dir) { return load_set(dir, nullptr); }

TaskSet load_task_set_collecting(const std::string& dir, std::vector<std::string>& errors) {
  return load_set(dir, &errors);
}

namespace {
TaskSet load_set(const std::string& dir, std::vector<std::string>* errors) {
  if (!fs::is_directory(dir)) throw ConfigError("task set " + dir + ": no such folder");
  TaskSet set;
  set.dir = dir;
  set.name = fs::path(dir).lexically_normal().filename().string();
  if (set.name.empty()) set.name = fs::path(dir).lexically_normal().parent_path().filename().string();
  std::vector<fs::path> folders;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && fs::exists(e.path() / "task.yaml")) folders.push_back(e.path());
  std::sort(folders.begin(), folders.end());
  std::set<std::string> broken;  // folder names left out (collecting mode)
  for (const auto& f : folders) {
    if (errors) {
      try {
        set.tasks.push_back(load_task(f.string()));
      } catch (const Error& e) {
        errors->push_back(e.what());
        broken.insert(f.filename().string());
        continue;
      }
    } else {
      set.tasks.push_back(load_task(f.string()));
    }
    for (size_t i = 0; i + 1 < set.tasks.size(); ++i)
      if (set.tasks[i].name == set.tasks.back().name)
        throw ConfigError(set.tasks.back().file + ": name: task name '" + set.tasks.back().name +
                          "' is also used by " + set.tasks[i].file);
  }
  if (set.tasks.empty() && errors && !errors->empty()) {
    // Every task.yaml failed: their errors are the news, not "no task folders".
    std::string msg = "task set " + dir + ": none of its " + std::to_string(folders.size()) + " task folder" +
                      (folders.size() == 1 ? "" : "s") + " loads:";
    for (const auto& e : *errors) msg += "\n  " + e;
    throw ConfigError(msg);
  }
  // Bad input, like a malformed task file: exit 2 (an empty folder said 1, a missing one 2).
  if (set.tasks.empty()) throw ConfigError("task set " + dir + ": no task folders (subfolders with a task.yaml)");
  std::sort(set.tasks.begin(), set.tasks.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  fs::path sy = fs::path(dir) / "set.yaml";
  if (fs::exists(sy)) {
    Ctx c{sy.string()};
    YAML::Node root;
    try {
      root = YAML::LoadFile(c.file);
    } catch (const YAML::Exception& e) {
      throw ConfigError(c.file + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
    }
    c.check_keys(root, "", {"name", "description", "train", "eval"});
    if (root["name"]) set.name = c.str(root["name"], "name");
    if (root["description"]) set.description = c.str(root["description"], "description");
    for (const char* split : {"train", "eval"}) {
      if (!root[split]) continue;
      YAML::Node n = root[split];
      if (!n.IsSequence()) c.fail(n, split, "expected a list of task names");
      auto& dest = std::string(split) == "train" ? set.train : set.eval;
      for (size_t i = 0; i < n.size(); ++i) {
        std::string name = c.str(n[i], std::string(split) + "[" + std::to_string(i) + "]");
        if (!set.find(name) && broken.count(name)) continue;  // reported already
        if (!set.find(name)) c.fail(n[i], std::string(split) + "[" + std::to_string(i) + "]", "no task named '" + name + "' in " + dir);
        if (std::find(dest.begin(), dest.end(), name) != dest.end())
          c.fail(n[i], std::string(split) + "[" + std::to_string(i) + "]", "task '" + name + "' is listed twice");
        dest.push_back(name);
      }
    }
    // A held-out task that is also trained on is no held-out task (a new user's set.yaml listed
    // one in both, 2026-12-07): allowed (a set may mean it), but warned of, naming it.
    if (root["train"] && root["eval"])
      for (const auto& name : set.eval)
        if (std::find(set.train.begin(), set.train.end(), name) != set.train.end())
          spdlog::warn("{}: task '{}' is listed in both train and eval: the held-out split holds a training task",
                       c.file, name);
    if (!root["train"])
      for (const auto& t : set.tasks)
        if (std::find(set.eval.begin(), set.eval.end(), t.name) == set.eval.end()) set.train.push_back(t.name);
  } else {
    for (const auto& t : set.tasks) set.train.push_back(t.name);
  }
  return set;
}
}  // namespace

}  // namespace leap::tasks
