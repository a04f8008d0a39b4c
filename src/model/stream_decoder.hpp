#pragma once
// Incremental detokenisation for streaming generation.
#include <string>

#include "model/tokenizer.hpp"

namespace leap::model {

/// Turns tokens into text one at a time. A UTF-8 character split across tokens is held back
/// until it is complete, so each push() returns only whole characters; the concatenation of
/// every push() and the final flush() equals Tokenizer::decode of all the ids.
/// Keeps a reference to the tokenizer, which must outlive it. Not thread-safe.
class StreamDecoder {
 public:
  /// `skip_special_tokens` as in Tokenizer::decode.
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = false)
      : tok_(&tok), skip_special_(skip_special_tokens) {}
  /// Adds one token; returns the newly completed text (possibly empty).
  std::string push(TokenId id);
  /// Returns what is still held (an incomplete character becomes U+FFFD) and resets.
  std::string flush();
  /// Bytes currently held back (0..3).
  std::size_t pending_bytes() const noexcept { return pending_.size(); }

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace leap::model
