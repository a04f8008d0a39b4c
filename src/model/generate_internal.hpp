#pragma once
// Pieces of generate() shared by its two decode loops (generate.cpp: the batch, prefill, the
// dynamic loop; static_decode.cpp: the static-shape loop). Not a public API.
#include <cstdint>
#include <vector>

#include "model/generate.hpp"
#include "model/stream_decoder.hpp"

namespace leap::model::detail {

/// The prompts left-padded into one batch: ids and attention mask [B, P] int64 on the model's
/// device, each row's next position, and whether any row is padded.
struct PromptBatch {
  torch::Tensor ids, attention_mask;
  std::vector<int64_t> next_pos;
  int64_t P = 0;
  bool padded = false;
};

/// Where generated tokens go: each row's Completion, its stream decoder (when a tokenizer was
/// given) and the stop rules.
struct TokenSink {
  std::vector<Completion>& out;
  std::vector<StreamDecoder>* decoders = nullptr;  ///< one per row, or null
  const SamplingParams& params;
  size_t max_stop_len = 0;  ///< the longest stop string
  /// Appends token `t` (log-prob `lp`) to row `b`; true when the row is finished: a stop string
  /// in its text, a stop token, or the last step.
  bool append(int64_t b, int64_t t, float lp, bool last_step);
};

/// The static-shape decode loop (DecodeMode::Static, and Graph when `graphs`): decodes after a
/// prefill that left `logits` [B, V] fp32 for the first token and `cache` (B rows, pb.P
/// columns written, max_len = pb.P + max_new_tokens). Appends every row's tokens to `sink`.
/// `graph_fallback`: a failed graph capture or replay is a warning and the loop goes on eagerly
/// (DecodeMode::Auto); else it throws.
void decode_static(Transformer& model, const PromptBatch& pb, KVCache& cache, torch::Tensor logits,
                   const SamplingParams& params, bool graphs, bool graph_fallback, TokenSink& sink,
                   at::Generator& gen);

}  // namespace leap::model::detail
