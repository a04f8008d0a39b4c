#pragma once
// Which config switches differ between runs: each run's stored config_yaml flattened to leaf keys.
#include <map>
#include <string>
#include <vector>

namespace leap::report {

/// Leaf keys of a YAML document as "a.b.c" -> scalar text (a sequence of scalars becomes
/// "[x, y]"). Throws leap::ConfigError naming `what` on a YAML syntax error.
std::map<std::string, std::string> flatten_yaml(const std::string& yaml, const std::string& what);

/// True for keys that never define an arm: `name` and any key whose last part is `seed`.
bool ignored_key(const std::string& key);

/// Keys (sorted) whose value differs between any two of `configs` (a key missing from one counts
/// as different), without ignored_key()s.
std::vector<std::string> differing_keys(const std::vector<std::map<std::string, std::string>>& configs);

}  // namespace leap::report
