#pragma once
// The key registry of the experiment schema: one entry per leaf key of `Experiment`, with its
// type, allowed values or range and a one-line description. Loading, `--set`, validation,
// serialisation and the reference-config test all walk this one table.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/experiment.hpp"

namespace leap::config {

/// Value type of a leaf key.
enum class FieldType { Bool, Int, Double, String, Enum, IntList, DoubleList, EnumList };

/// One leaf key of the schema.
struct Field {
  std::string path;                  ///< dotted key path, e.g. "dcp.min_fail_ratio"
  FieldType type;
  std::string doc;                   ///< one-line description
  std::vector<std::string> choices;  ///< allowed values of Enum / EnumList
  std::optional<double> min;         ///< inclusive lower bound of numbers (and of list items)
  std::optional<double> max;         ///< inclusive upper bound
  bool min_exclusive = false;        ///< the lower bound itself is out of range
  std::function<void*(Experiment&)> ref;  ///< address of the member in an Experiment
};

/// Every leaf key, in the order `to_yaml` writes them (section by section).
const std::vector<Field>& schema();

/// The field with this dotted path, or nullptr.
const Field* find_field(const std::string& path);

/// Human text of a field's type and range, e.g. "a number in [0, 1]" or "one of rank, binary".
std::string describe_type(const Field& f);

/// The known key closest to `path` by edit distance, or "" when none is close.
std::string suggest_key(const std::string& path);

}  // namespace leap::config
