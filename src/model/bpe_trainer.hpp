#pragma once
// A small byte-level BPE trainer that writes a Qwen2-style tokenizer.json (torch-free).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace leap::model {

/// The Qwen2 pre-tokenizer split pattern (words, single digits, punctuation runs, whitespace).
extern const char* const kQwen2SplitPattern;
/// A split pattern of whole lines: each line with its newline (or the text after the last
/// newline) is one pre-token, so BPE may merge a whole source line into one id. For models trained
/// from scratch on a narrow family (the generated tasks, docs/generator.md): a copied line is then
/// a few ids instead of one per digit and punctuation mark.
extern const char* const kLineSplitPattern;

/// Options for train_bpe.
struct BpeTrainOptions {
  int64_t vocab_size = 1024;  ///< total ids including the 256 byte tokens and the special tokens
  int64_t min_frequency = 2;  ///< a pair seen fewer times is never merged
  std::string split_pattern = kQwen2SplitPattern;  ///< the pre-tokenizer regex (PCRE2), written to tokenizer.json
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
};

/// A trained byte-level BPE: vocab (byte-level strings, id = index), merges in rank order
/// (byte-level strings), then the special tokens with ids vocab.size() .. + specials.
struct TrainedBpe {
  std::vector<std::string> vocab;
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<std::string> special_tokens;
  std::string split_pattern = kQwen2SplitPattern;  ///< the pre-tokenizer regex it was trained with
  /// Qwen2-style tokenizer.json: NFC, Split(split_pattern, Isolated) + ByteLevel, BPE, ByteLevel
  /// decoder, specials as added tokens.
  std::string tokenizer_json() const;
  int64_t size() const { return static_cast<int64_t>(vocab.size() + special_tokens.size()); }
};

/// Counts the words of `texts` (split with opts.split_pattern), then starting from the 256 bytes
/// repeatedly merges the most frequent adjacent pair (ties: the smaller pair of ids) until the
/// vocabulary reaches opts.vocab_size or no pair reaches min_frequency. Deterministic. Pair counts
/// are kept up to date incrementally (only the words holding the merged pair are re-counted), so
/// a corpus of thousands of distinct long words trains in seconds. Throws leap::ModelError for a
/// split pattern PCRE2 rejects.
TrainedBpe train_bpe(const std::vector<std::string>& texts, const BpeTrainOptions& opts);

/// The text of every task.yaml and solutions/*.md under `dir` (recursively), sorted by path;
/// empty when `dir` does not exist.
std::vector<std::string> read_task_corpus(const std::filesystem::path& dir);

}  // namespace leap::model
