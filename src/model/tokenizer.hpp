#pragma once
// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json (Qwen2/2.5/3, Llama-3).
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/added_vocabulary.hpp"
#include "model/bpe.hpp"
#include "model/normalizer.hpp"
#include "model/pre_tokenizer.hpp"

namespace leap::model {

/// Options for Tokenizer::encode.
struct EncodeOptions {
  /// Match special added tokens (<|im_start|>) in the text. false treats them as plain text
  /// (HF's split_special_tokens / encode_special_tokens), for untrusted input.
  bool split_special_tokens = true;
  /// Add the post-processor's tokens (Llama-3: <|begin_of_text|> in front), as HF's
  /// add_special_tokens. Off by default: chat templates write their own BOS.
  bool add_special_tokens = false;
};

/// A byte-level BPE tokenizer, equal to HF `tokenizers` on encode and decode for the files it
/// accepts: added/special tokens split out first (leftmost-longest), the normalizer (NFC...),
/// the pre_tokenizer (Split regex via PCRE2 + ByteLevel), BPE with ranked merges
/// (ignore_merges honoured), ByteLevel decoding. Immutable after loading and safe to share
/// between threads; copies share the (large) model.
class Tokenizer {
 public:
  /// Loads `path` (a tokenizer.json, or a checkpoint folder containing one).
  /// Throws leap::ModelError naming the file when it is missing, not JSON, or uses a
  /// component leap does not implement (the message names it and lists the supported ones).
  static Tokenizer from_file(const std::filesystem::path& path);
  /// Loads tokenizer.json text; `source` names it in messages. Throws like from_file.
  static Tokenizer from_json(std::string_view json_text, const std::string& source);

  /// Token ids of `text` (UTF-8; invalid bytes are first replaced by U+FFFD).
  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& opts = {}) const;

  /// Text of `ids`: bytes of each token joined, then invalid UTF-8 replaced by U+FFFD (as HF).
  /// Ids the tokenizer does not know (e.g. padded embedding rows) are skipped, as HF does.
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  /// Raw bytes a token decodes to (may be part of a UTF-8 character); empty for unknown ids.
  const std::string& token_bytes(TokenId id) const;

  /// Id of an added token by its content, or of a vocab token by its byte-level string
  /// ("Ġthe"); nullopt if neither.
  std::optional<TokenId> token_to_id(std::string_view token) const;
  /// Content of an added token or byte-level string of a vocab token; nullopt if unknown.
  std::optional<std::string> id_to_token(TokenId id) const;
  /// True for ids of added tokens marked special.
  bool is_special(TokenId id) const;
  /// One past the largest id (vocab and added tokens).
  TokenId vocab_size() const noexcept { return id_end_; }
  /// The added tokens in file order.
  const std::vector<AddedToken>& added_tokens() const noexcept { return s_->added; }
  /// Ids the post-processor puts before / after a single sequence (add_special_tokens).
  const std::vector<TokenId>& prefix_ids() const noexcept { return s_->prefix; }
  const std::vector<TokenId>& suffix_ids() const noexcept { return s_->suffix; }

 private:
  Tokenizer() = default;  // only through from_file / from_json
  struct State {
    std::unique_ptr<BpeModel> bpe;
    Normalizer normalizer;
    PreTokenizer pre;
    std::vector<AddedToken> added;
    AddedTokenMatcher raw_matcher;   // normalized == false tokens, on raw text
    AddedTokenMatcher norm_matcher;  // normalized == true tokens, on normalised text
    std::unordered_map<std::string, TokenId> added_by_content;
    std::vector<std::string> bytes;  // id -> decoded bytes
    std::vector<int8_t> special;     // id -> is special added token
    std::vector<int8_t> known;       // id -> exists
    std::vector<TokenId> prefix, suffix;
  };
  std::shared_ptr<const State> s_;
  TokenId id_end_ = 0;
};

/// Checks that every id of `tok` (vocab and added tokens) has a row in a model of `model_vocab`
/// rows (config.json's vocab_size; a model may have more rows than the tokenizer has ids, as
/// Qwen2.5's padded embeddings). Throws leap::ModelError naming `model_dir`'s tokenizer.json, the
/// largest id and the token, and the vocab_size, instead of an index error deep in a forward.
void check_tokenizer_fits(const Tokenizer& tok, int64_t model_vocab, const std::filesystem::path& model_dir);

}  // namespace leap::model
