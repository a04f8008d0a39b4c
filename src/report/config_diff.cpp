#include "report/config_diff.hpp"

#include <yaml-cpp/yaml.h>

#include <set>

#include "util/error.hpp"

namespace leap::report {

namespace {

void walk(const YAML::Node& n, const std::string& prefix, std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    for (auto it = n.begin(); it != n.end(); ++it)
      walk(it->second, prefix.empty() ? it->first.as<std::string>() : prefix + "." + it->first.as<std::string>(), out);
  } else if (n.IsSequence()) {
    std::string s = "[";
    for (size_t i = 0; i < n.size(); ++i) s += (i ? ", " : "") + (n[i].IsScalar() ? n[i].as<std::string>() : YAML::Dump(n[i]));
    out[prefix] = s + "]";
  } else if (n.IsScalar()) {
    out[prefix] = n.as<std::string>();
  } else {
    out[prefix] = "";
  }
}

}  // namespace

std::map<std::string, std::string> flatten_yaml(const std::string& yaml, const std::string& what) {
  std::map<std::string, std::string> out;
  try {
    walk(YAML::Load(yaml), "", out);
  } catch (const YAML::Exception& e) {
    throw ConfigError(what + ":" + std::to_string(e.mark.line + 1) + ": YAML syntax error: " + e.msg);
  }
  return out;
}

bool ignored_key(const std::string& key) {
  if (key == "name") return true;
  const size_t dot = key.rfind('.');
  return (dot == std::string::npos ? key : key.substr(dot + 1)) == "seed";
}

std::vector<std::string> differing_keys(const std::vector<std::map<std::string, std::string>>& configs) {
  std::set<std::string> keys, out;
  for (const auto& c : configs)
    for (const auto& [k, v] : c) keys.insert(k);
  for (const auto& k : keys) {
    if (ignored_key(k)) continue;
    const std::string* first = nullptr;
    bool missing = false;
    for (const auto& c : configs) {
      auto it = c.find(k);
      if (it == c.end()) {
        missing = true;
        continue;
      }
      if (!first) first = &it->second;
      else if (*first != it->second) out.insert(k);
    }
    if (missing && configs.size() > 1) out.insert(k);
  }
  return {out.begin(), out.end()};
}

}  // namespace leap::report
