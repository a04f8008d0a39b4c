#pragma once
// A compiled PCRE2 pattern (UTF + UCP), used for the tokenizer's Split pre-tokenizer.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace leap::model {

/// A PCRE2 regex compiled with PCRE2_UTF | PCRE2_UCP (and JIT when available). Immutable and
/// safe to use from several threads at once. Oniguruma patterns used by HF tokenizers
/// ((?i:...), \p{L}, \p{N}, (?!\S), ...) have the same meaning in PCRE2.
class Regex {
 public:
  /// Compiles `pattern`; `literal` treats it as a plain string. Throws leap::ModelError with
  /// the PCRE2 message and offset on a bad pattern.
  explicit Regex(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /// Byte spans [begin, end) of all non-overlapping, non-empty matches in `text`, left to
  /// right. `text` must be valid UTF-8. Throws leap::ModelError if matching fails (e.g. the
  /// match limit is hit).
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

  /// The source pattern.
  const std::string& pattern() const noexcept { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace leap::model
