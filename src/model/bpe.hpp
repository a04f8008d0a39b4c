#pragma once
// Byte-level BPE model: vocab + ranked merges, with a per-word cache.
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace leap::model {

/// A token id.
using TokenId = int32_t;

/// The BPE model of a byte-level tokenizer. Vocabulary strings are in GPT-2 byte-level form
/// ("Ġthe"); encode_word takes raw bytes. Thread-safe (the word cache is locked).
class BpeModel {
 public:
  /// Builds the model. `merges` are (left, right) vocabulary strings in rank order.
  /// `ignore_merges`: a word that is itself in the vocabulary becomes that one token.
  /// `unk_id`: id for a byte with no vocabulary entry (-1: such bytes are dropped, as HF does
  /// without an unk token). Throws leap::ModelError (prefixed with `source`) when a merge uses a
  /// token not in the vocabulary or its result is not in the vocabulary, or ids are negative/duplicated.
  BpeModel(std::unordered_map<std::string, TokenId> vocab,
           const std::vector<std::pair<std::string, std::string>>& merges, bool ignore_merges,
           TokenId unk_id, const std::string& source);

  /// Token ids of one pre-tokenized word given as raw bytes, appended to `out`.
  void encode_word(std::string_view bytes, std::vector<TokenId>& out) const;

  /// The id of a vocabulary string (byte-level form), or -1.
  TokenId token_to_id(std::string_view token) const;
  /// The vocabulary string for `id`, or nullptr if the model has no such id.
  const std::string* id_to_token(TokenId id) const;
  /// One past the largest id in the vocabulary.
  TokenId id_end() const noexcept { return static_cast<TokenId>(id_to_token_.size()); }

 private:
  void merge_word(std::string_view bytes, std::vector<TokenId>& out) const;

  std::unordered_map<std::string, TokenId> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, std::pair<uint32_t, TokenId>> merges_;  // (a<<32|b) -> (rank, new id)
  std::array<TokenId, 256> byte_ids_{};
  bool ignore_merges_ = false;
  TokenId unk_id_ = -1;

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<TokenId>> cache_;
};

}  // namespace leap::model
