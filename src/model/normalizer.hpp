#pragma once
// The tokenizer.json "normalizer": a sequence of Unicode normalisation forms.
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "model/utf8.hpp"

namespace leap::model {

/// Applies the normalizer of a tokenizer.json: null (identity), NFC, NFD, NFKC, NFKD, or a
/// Sequence of those.
class Normalizer {
 public:
  /// Identity normalizer.
  Normalizer() = default;
  /// Reads the "normalizer" value. Throws leap::ModelError naming `source` and listing the
  /// supported types for any other type.
  static Normalizer from_json(const nlohmann::json& j, const std::string& source);
  /// Normalised UTF-8 text.
  std::string apply(std::string_view text) const;
  /// True when apply() is the identity.
  bool identity() const noexcept { return steps_.empty(); }

 private:
  std::vector<NormalForm> steps_;
};

}  // namespace leap::model
