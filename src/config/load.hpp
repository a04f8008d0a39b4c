#pragma once
// Loading an Experiment from YAML, `--set key.path=value` overrides, validation and
// serialisation back to YAML. Every error is a leap::ConfigError (exit code 2) naming the file
// (or the override), the key path and line:column.
#include <string>
#include <vector>

#include "config/experiment.hpp"

namespace leap::config {

/// Reads `path` and applies `overrides` ("key.path=value", the value parsed as YAML) in order,
/// then validates. Throws ConfigError (exit 2) for a missing or unreadable file, a folder, a file
/// with no keys (empty or only comments), YAML syntax, an unknown
/// key, a wrong type, an out-of-range value or an inconsistent combination.
Experiment load_experiment(const std::string& path, const std::vector<std::string>& overrides = {});

/// Parses YAML text; `source` names it in errors (a file path). Applies and validates like
/// load_experiment, starting from the defaults.
Experiment parse_experiment(const std::string& yaml_text, const std::string& source,
                            const std::vector<std::string>& overrides = {});

/// Applies one "key.path=value" override to `exp` with the same type and range checks as the
/// file (cross-key checks run in validate()). Throws ConfigError naming the override.
void apply_override(Experiment& exp, const std::string& key_value);

/// True when the experiment scores every graded turn as a node of its group's debugging tree
/// (rl/scoring.hpp score_tree): turns.branch > 1, reward.tree other than none, or advantage.kind
/// sae / sae_projection. The one definition the trainer and validate() share.
bool tree_scoring(const Experiment& exp);

/// Cross-key checks (e.g. dcp.min_fail_ratio <= dcp.max_fail_ratio). `source` names the config
/// in the error message. Throws ConfigError.
void validate(const Experiment& exp, const std::string& source);

/// Checks that the folders a run reads exist: `model.path` (a checkpoint folder) and
/// `tasks.dir`. Throws ConfigError naming `source`, the key and the folder (for a missing model
/// folder, with the command that creates the tiny one). Reads the file system only.
void require_input_folders(const Experiment& exp, const std::string& source);

/// `exp` with every `auto` value replaced by what it stands for: loss.aggregation `auto` becomes
/// segment_mean when compaction.enabled, token_mean otherwise (an explicit value is kept). The
/// trainer runs, and stores in the run's config row, this resolved form.
Experiment resolved(const Experiment& exp);

/// The whole resolved config as YAML, every key, in schema order; parse_experiment of the
/// result gives back an equal Experiment. With `comments`, each key carries its one-line
/// description (the form of configs/reference.yaml).
std::string to_yaml(const Experiment& exp, bool comments = false);

/// 16 hex digits identifying the resolved config (hash of to_yaml), stored with each run.
std::string config_hash(const Experiment& exp);

/// All leaf key paths present in a YAML document (e.g. to check that configs/reference.yaml
/// lists every key). Throws ConfigError on YAML syntax errors.
std::vector<std::string> leaf_keys(const std::string& yaml_text, const std::string& source);

}  // namespace leap::config
