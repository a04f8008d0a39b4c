#pragma once
// Added / special tokens of a tokenizer.json, split out of text before BPE.
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/bpe.hpp"

namespace leap::model {

/// One entry of tokenizer.json "added_tokens".
struct AddedToken {
  TokenId id = -1;
  std::string content;       ///< The literal text.
  bool special = false;      ///< A control token (<|im_end|>); skipped by decode(skip_special).
  bool normalized = false;   ///< Matched against normalised text (else against raw text).
  bool lstrip = false;       ///< Swallows whitespace on its left.
  bool rstrip = false;       ///< Swallows whitespace on its right.
  bool single_word = false;  ///< Only matches when not inside a word.
};

/// A piece of text after added-token splitting: either an added token or plain text.
struct Segment {
  std::string text;   ///< The text (for a token: the matched span incl. stripped whitespace).
  TokenId id = -1;    ///< The added token's id, or -1 for plain text.
};

/// Finds added tokens in text: leftmost-longest match, as HF tokenizers' AddedVocabulary.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  /// `tokens` with the content each is matched by (normalised content for normalized tokens).
  AddedTokenMatcher(const std::vector<AddedToken>& tokens, const std::vector<std::string>& match_text);
  /// Splits `text` into plain and token segments. With `split_special == false`, special
  /// tokens are not matched (they stay plain text).
  std::vector<Segment> split(std::string_view text, bool split_special) const;
  /// True if nothing can match.
  bool empty() const noexcept { return entries_.empty(); }

 private:
  struct Entry {
    std::string text;
    const AddedToken* token;
  };
  std::vector<Entry> entries_;                               // all, longest first
  std::unordered_map<unsigned char, std::vector<std::size_t>> by_first_;  // first byte -> entries
};

}  // namespace leap::model
