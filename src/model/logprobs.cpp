// Log-probs and entropies of tokens under the policy (model/transformer.hpp): full forwards,
// completion spans, shared prompt prefixes; the LM head and log_softmax in chunks.
#include <limits>

#include "model/autocast.hpp"
#include "model/transformer.hpp"
#include "util/error.hpp"

namespace leap::model {

torch::Tensor positions_from_mask(const torch::Tensor& attention_mask) {
  auto m = attention_mask.to(torch::kInt64);
  auto pos = m.cumsum(-1) - 1;
  return pos.masked_fill(m == 0, 1);
}

namespace {

// Log-probs and entropies of the last C tokens of `tokens` [B, T] from the hidden states [B, T, H]
// of the same rows: the LM head + log_softmax over `chunk` positions at a time, each chunk
// recomputed in backward.
//
// With `spans`, output row k scores the spans->len tokens of row spans->row[k] from column
// spans->start[k] on instead (columns past the row's end are clamped to its last column; the
// caller masks them out). The hidden states are gathered by index_select, whose backward adds,
// so rows scored by several outputs get the sum of their gradients.
TokenLogProbs head_logprobs(Transformer& model, const torch::Tensor& hidden, const torch::Tensor& tokens,
                            int64_t C, double temperature, int64_t chunk, const ScoreSpans* spans = nullptr,
                            int64_t offset = 0) {
  // hidden [B, S - offset, H] holds the columns from `offset` on.
  const int64_t S = tokens.size(1);
  torch::Tensor h, targets;
  if (spans == nullptr) {
    h = hidden.narrow(1, S - C - 1 - offset, C);
    targets = tokens.narrow(1, S - C, C);
  } else {
    C = spans->len;
    const int64_t M = spans->row.size(0), B = tokens.size(0), H = hidden.size(2), Sh = hidden.size(1);
    const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(tokens.device());
    auto cols = (spans->start.to(opts).unsqueeze(1) + torch::arange(C, opts).unsqueeze(0)).clamp(1, S - 1);  // [M, C]
    auto row = spans->row.to(opts).unsqueeze(1);
    h = hidden.reshape({B * Sh, H}).index_select(0, (row * Sh + cols - 1 - offset).reshape({-1})).view({M, C, H});
    targets = tokens.reshape({-1}).index_select(0, (row * S + cols).reshape({-1})).view({M, C});
  }
  std::vector<torch::Tensor> params;
  auto w = model->lm_head ? model->lm_head->weight : model->embed_tokens->weight;
  if (w.requires_grad()) params.push_back(w);
  if (model->lm_head && model->lm_head->has_lora()) {
    params.push_back(model->lm_head->lora_a);
    params.push_back(model->lm_head->lora_b);
  }
  std::vector<torch::Tensor> lps, ents;
  for (int64_t s = 0; s < C; s += chunk) {
    const int64_t n = std::min(chunk, C - s);
    auto tg = targets.narrow(1, s, n);
    auto fn = [model, tg, temperature](const std::vector<torch::Tensor>& in) mutable {
      auto logits = model->logits(in[0]).to(torch::kFloat32);
      if (temperature != 1.0) logits = logits / temperature;
      auto lsm = torch::log_softmax(logits, -1);
      auto lp = lsm.gather(-1, tg.unsqueeze(-1)).squeeze(-1);
      auto ent = -(lsm.exp() * lsm).sum(-1);
      return std::vector<torch::Tensor>{lp, ent};
    };
    auto out = checkpoint(fn, {h.narrow(1, s, n)}, params);
    lps.push_back(out[0]);
    ents.push_back(out[1]);
  }
  return {torch::cat(lps, 1), torch::cat(ents, 1)};
}

}  // namespace

namespace {

/// The first column whose hidden state a span reads (start - 1; 0 without spans).
int64_t first_read_column(const ScoreSpans& spans) {
  return spans.start.numel() == 0 ? 0 : std::max<int64_t>(0, spans.start.min().item<int64_t>() - 1);
}

/// Spans over `rows` rows of `width` columns.
void check_spans(const ScoreSpans& spans, int64_t rows, int64_t width) {
  TORCH_CHECK(spans.row.dim() == 1 && spans.start.sizes() == spans.row.sizes(), "spans.row and spans.start must be [M]");
  TORCH_CHECK(spans.len >= 1, "spans.len must be >= 1");
  if (spans.row.numel() == 0) return;
  const auto r = spans.row.cpu(), st = spans.start.cpu();
  TORCH_CHECK(r.min().item<int64_t>() >= 0 && r.max().item<int64_t>() < rows, "spans.row out of range");
  TORCH_CHECK(st.min().item<int64_t>() >= 1 && st.max().item<int64_t>() < width,
              "spans.start must be in [1, seq_len)");
}

TokenLogProbs forward_logprobs(Transformer& model, const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                               int64_t C, double temperature, int64_t chunk, const ScoreSpans* spans) {
  torch::Tensor pos, mask;
  if (attention_mask.defined()) {
    pos = positions_from_mask(attention_mask);
    mask = attention_mask.to(torch::kBool);
  }
  // Only the columns that predict a scored token need the last layer's outputs.
  const int64_t from = spans == nullptr ? tokens.size(1) - C - 1 : first_read_column(*spans);
  auto hidden = model->forward(tokens, pos, mask, nullptr, nullptr, nullptr, from);
  return head_logprobs(model, hidden, tokens, C, temperature, chunk, spans, from);
}

}  // namespace

TokenLogProbs completion_logprobs(Transformer& model, const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                  int64_t completion_len, double temperature, int64_t chunk) {
  const int64_t S = tokens.size(1), C = completion_len;
  TORCH_CHECK(C >= 1 && C < S, "completion_len must be in [1, seq_len)");
  return forward_logprobs(model, tokens, attention_mask, C, temperature, chunk, nullptr);
}

TokenLogProbs completion_logprobs(Transformer& model, const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                  const ScoreSpans& spans, double temperature, int64_t chunk) {
  check_spans(spans, tokens.size(0), tokens.size(1));
  return forward_logprobs(model, tokens, attention_mask, spans.len, temperature, chunk, &spans);
}

PrefixKV prefix_keys_values(Transformer& model, const torch::Tensor& prefix_tokens, const torch::Tensor& prefix_mask,
                            int64_t hidden_from) {
  TORCH_CHECK(prefix_tokens.dim() == 2 && prefix_mask.sizes() == prefix_tokens.sizes(),
              "prefix_tokens and prefix_mask must be [U, Lp]");
  const int64_t Lp = prefix_tokens.size(1);
  TORCH_CHECK(hidden_from >= 0, "hidden_from must be >= 0");
  PrefixKV kv;
  kv.hidden_from = std::min(hidden_from, Lp);
  kv.hidden = model->forward(prefix_tokens, positions_from_mask(prefix_mask), prefix_mask.to(torch::kBool), nullptr,
                             nullptr, &kv, kv.hidden_from);
  kv.tokens = prefix_tokens;
  return kv;
}

namespace {

TokenLogProbs continue_forward(Transformer& model, const PrefixKV& prefix, const torch::Tensor& prefix_mask,
                               const torch::Tensor& prefix_row, const torch::Tensor& tokens,
                               const torch::Tensor& attention_mask, int64_t C, double temperature, int64_t chunk,
                               const ScoreSpans* spans) {
  TORCH_CHECK(prefix_row.dim() == 1 && prefix_row.size(0) == tokens.size(0), "prefix_row must be [B]");
  TORCH_CHECK(attention_mask.sizes() == tokens.sizes(), "attention_mask must be [B, T]");
  const PrefixKV rows = prefix.select_rows(prefix_row);
  // Row b's positions continue its prefix's real tokens.
  auto plen = prefix_mask.to(torch::kInt64).sum(1).index_select(0, prefix_row);  // [B]
  auto tm = attention_mask.to(torch::kInt64);
  auto pos = (tm.cumsum(-1) - 1 + plen.unsqueeze(1)).masked_fill(tm == 0, 1);
  auto key_mask = torch::cat({prefix_mask.to(torch::kBool).index_select(0, prefix_row), attention_mask.to(torch::kBool)}, 1);
  if (spans == nullptr) {
    const int64_t from = tokens.size(1) - C - 1;
    auto hidden = model->forward(tokens, pos, key_mask, nullptr, &rows, nullptr, from);
    return head_logprobs(model, hidden, tokens, C, temperature, chunk, nullptr, from);
  }
  // Spans count columns of [prefix | tokens]. When none reads a prefix column (the first scored
  // token's predictor is column start - 1), the rows alone are enough.
  const int64_t Lp = prefix_mask.size(1), first = first_read_column(*spans);
  if (first >= Lp) {
    ScoreSpans tail{spans->row, spans->start - Lp, spans->len};
    auto hidden = model->forward(tokens, pos, key_mask, nullptr, &rows, nullptr, first - Lp);
    return head_logprobs(model, hidden, tokens, C, temperature, chunk, &tail, first - Lp);
  }
  TORCH_CHECK(prefix.hidden.defined() && prefix.tokens.defined() && prefix.hidden_from <= first &&
                  prefix.hidden.size(1) == Lp - prefix.hidden_from,
              "a span in the prefix needs the prefix's hidden states from its column on (prefix_keys_values)");
  auto hidden = model->forward(tokens, pos, key_mask, nullptr, &rows);
  auto full_hidden = torch::cat({prefix.hidden.index_select(0, prefix_row).to(hidden.scalar_type()), hidden}, 1);
  auto full_tokens = torch::cat({prefix.tokens.index_select(0, prefix_row), tokens}, 1);
  return head_logprobs(model, full_hidden, full_tokens, C, temperature, chunk, spans, prefix.hidden_from);
}

}  // namespace

TokenLogProbs continue_logprobs(Transformer& model, const PrefixKV& prefix, const torch::Tensor& prefix_mask,
                                const torch::Tensor& prefix_row, const torch::Tensor& tokens,
                                const torch::Tensor& attention_mask, int64_t completion_len, double temperature,
                                int64_t chunk) {
  const int64_t T = tokens.size(1), C = completion_len;
  TORCH_CHECK(C >= 1 && C < T, "completion_len must be in [1, tail_len)");
  return continue_forward(model, prefix, prefix_mask, prefix_row, tokens, attention_mask, C, temperature, chunk,
                          nullptr);
}

TokenLogProbs continue_logprobs(Transformer& model, const PrefixKV& prefix, const torch::Tensor& prefix_mask,
                                const torch::Tensor& prefix_row, const torch::Tensor& tokens,
                                const torch::Tensor& attention_mask, const ScoreSpans& spans, double temperature,
                                int64_t chunk) {
  TORCH_CHECK(prefix_mask.dim() == 2, "prefix_mask must be [U, Lp]");
  check_spans(spans, tokens.size(0), prefix_mask.size(1) + tokens.size(1));
  return continue_forward(model, prefix, prefix_mask, prefix_row, tokens, attention_mask, spans.len, temperature,
                          chunk, &spans);
}

TokenLogProbs completion_logprobs_shared(Transformer& model, const torch::Tensor& prefix_tokens,
                                         const torch::Tensor& prefix_mask, const torch::Tensor& prefix_row,
                                         const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                         int64_t completion_len, double temperature, int64_t chunk) {
  const PrefixKV kv = prefix_keys_values(model, prefix_tokens, prefix_mask);
  return continue_logprobs(model, kv, prefix_mask, prefix_row, tokens, attention_mask, completion_len, temperature,
                           chunk);
}

}  // namespace leap::model
