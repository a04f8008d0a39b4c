#pragma once
// The tokenizer.json "pre_tokenizer": regex Split and ByteLevel steps.
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/regex.hpp"

namespace leap::model {

/// Splits normalised text into the words BPE sees. Supports Split (Regex or String pattern,
/// behaviours Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous; invert),
/// ByteLevel (add_prefix_space, use_regex with GPT-2's pattern) and Sequence of those.
/// Immutable and thread-safe; cheap to copy.
class PreTokenizer {
 public:
  /// No splitting (the whole text is one word).
  PreTokenizer() = default;
  /// Reads the "pre_tokenizer" value. Throws leap::ModelError naming `source` for an unknown
  /// type or behaviour (the message lists the supported ones) or a bad regex.
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& source);
  /// The words (raw UTF-8 bytes, never empty) of `text`, in order.
  std::vector<std::string> split(std::string_view text) const;

 private:
  enum class Behavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };
  struct Step {
    bool byte_level = false;
    bool add_prefix_space = false;
    std::shared_ptr<const Regex> regex;  // Split pattern, or GPT-2's for ByteLevel(use_regex)
    Behavior behavior = Behavior::Isolated;
    bool invert = false;
  };
  static void add_steps(const nlohmann::json& j, const std::string& source, std::vector<Step>& steps);
  static void apply(const Step& step, std::string_view piece, std::vector<std::string>& out);
  std::vector<Step> steps_;
};

}  // namespace leap::model
