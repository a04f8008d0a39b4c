#pragma once
// `leap model init --preset tiny`: a small random Qwen2-style checkpoint as a real HF folder.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace leap::model {

/// What init_tiny_model wrote.
struct TinyModelInfo {
  int64_t vocab_size = 0;       ///< tokenizer ids == embedding rows
  int64_t num_parameters = 0;
  int64_t corpus_documents = 0; ///< documents the tokenizer was trained on: files, or TinyTokenizerOptions::corpus texts (0 = built-in text)
};

/// How init_tiny_model trains the tokenizer.
struct TinyTokenizerOptions {
  /// "words": the Qwen2 split pattern (words, single digits, punctuation runs). "lines":
  /// kLineSplitPattern (a line is one pre-token, so a frequent source line becomes one or a few
  /// ids; docs/model.md, docs/generator.md "The line tokenizer").
  std::string pretokenizer = "words";
  int64_t vocab_size = 0;  ///< total ids with the 3 special tokens; 0 = 1024 (words) or 4096 (lines)
  /// When not empty, the corpus itself (the CLI passes, for `lines`, the train split's rendered
  /// turn-1 prompts and shipped solutions), and the corpus folder is not read.
  std::vector<std::string> corpus;
};

/// The pretokenizers TinyTokenizerOptions knows.
inline const char* const kTinyPretokenizers[] = {"words", "lines"};

/// Writes config.json, generation_config.json, model.safetensors (fp32, random N(0, 0.02)
/// weights from `seed`), tokenizer.json (byte-level BPE trained here on the task.yaml and
/// solutions/*.md files under `corpus_dir`, or a built-in text when there are none; 1024 ids
/// including <|endoftext|>, <|im_start|>, <|im_end|>) and tokenizer_config.json to `out`.
/// Preset "tiny": hidden 128, 4 layers, 4 heads, 2 KV heads, MLP 384, tied embeddings.
/// Preset "qwen2.5-1.5b-shape": Qwen2.5-1.5B's shapes (hidden 1536, 28 layers, 12 heads, 2 KV
/// heads, MLP 8960, 151936 embedding rows, tied), random weights stored in bf16 (about 3 GB):
/// for speed and memory figures at that size (scripts/gpu-check.sh), never for quality; the
/// tokenizer is the small one, so only its 1024 ids are ever produced.
/// `tok` chooses the tokenizer's pre-tokenizer, size and corpus (defaults: as above).
/// Throws leap::ModelError for an unknown preset or pretokenizer, a vocab_size outside
/// [512, 65536], an unwritable folder, or a folder holding weights this would not overwrite
/// (shards, an index, an adapter, .bin files: a loader would read them instead).
/// The presets init_tiny_model knows, in the order `leap model init --help` lists them.
inline const char* const kModelPresets[] = {"tiny", "qwen2.5-1.5b-shape"};

TinyModelInfo init_tiny_model(const std::filesystem::path& out, const std::filesystem::path& corpus_dir,
                              const std::string& preset = "tiny", uint64_t seed = 0,
                              const TinyTokenizerOptions& tok = {});

}  // namespace leap::model
