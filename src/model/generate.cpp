#include "model/generate.hpp"


#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "model/autocast.hpp"
#include "model/generate_internal.hpp"
#include "model/stream_decoder.hpp"
#include "util/error.hpp"

namespace leap::model {

const char* finish_reason_name(FinishReason r) noexcept {
  switch (r) {
    case FinishReason::Length: return "length";
    case FinishReason::StopToken: return "stop_token";
    case FinishReason::StopString: return "stop_string";
  }
  return "length";
}

torch::Tensor sampling_noise(int64_t rows, int64_t vocab, const torch::Device& device, double temperature,
                             at::Generator& gen) {
  if (temperature <= 0) return {};
  if (device.is_cpu())
    return at::rand({rows, 1}, gen, torch::TensorOptions().dtype(torch::kFloat64).device(device));
  auto e = at::empty({rows, vocab}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  e.exponential_(1.0, gen);
  // A variate of 0 would turn a token of probability 0 into 0 / 0 = NaN, which argmax picks.
  return e.clamp_min_(std::numeric_limits<float>::min());
}

std::pair<torch::Tensor, torch::Tensor> sample_with_noise(const torch::Tensor& logits, const SamplingParams& p,
                                                          const torch::Tensor& noise) {
  if (p.temperature <= 0 || !noise.defined()) {
    auto next = logits.argmax(-1);
    auto lp = torch::log_softmax(logits, -1).gather(-1, next.unsqueeze(-1)).squeeze(-1);
    return {next, lp};
  }
  TORCH_CHECK(noise.size(0) == logits.size(0) && (noise.size(1) == 1 || noise.size(1) == logits.size(1)),
              "sample_with_noise: noise must be [B, 1] or [B, V]");
  auto l = logits / p.temperature;
  auto lsm = torch::log_softmax(l, -1);
  const double ninf = -std::numeric_limits<double>::infinity();
  if (p.top_k > 0 && p.top_k < l.size(-1)) {
    auto kth = std::get<0>(l.topk(p.top_k, -1)).narrow(-1, p.top_k - 1, 1);
    l = l.masked_fill(l < kth, ninf);
  }
  if (p.top_p < 1.0) {
    auto [sorted, idx] = l.sort(-1, /*descending=*/true);
    auto probs = sorted.softmax(-1);
    auto remove = (probs.cumsum(-1) - probs) > p.top_p;
    sorted = sorted.masked_fill(remove, ninf);
    l = torch::empty_like(l).scatter_(-1, idx, sorted);
  }
  torch::Tensor next;
  if (noise.size(1) == 1) {
    // Inverse CDF: the row's uniform against the cumulative probabilities (float64). A token of
    // probability 0 (cut by top-k / top-p) spans an empty interval of the CDF and is never drawn.
    auto cdf = l.softmax(-1).to(torch::kFloat64).cumsum(-1);
    auto u = noise.to(cdf.options()) * cdf.narrow(-1, cdf.size(-1) - 1, 1);
    next = torch::searchsorted(cdf, u, /*out_int32=*/false, /*right=*/true).squeeze(-1).clamp_max(cdf.size(-1) - 1);
  } else {
    // The exponential race: argmax_i p_i / E_i with E_i ~ Exp(1) picks i with probability p_i
    // (the smallest of E_i / p_i, independent exponentials of rates p_i). A cut token has p = 0.
    next = (l.softmax(-1) / noise.to(torch::kFloat32)).argmax(-1);
  }
  auto lp = lsm.gather(-1, next.unsqueeze(-1)).squeeze(-1);
  return {next, lp};
}

std::pair<torch::Tensor, torch::Tensor> sample_next(const torch::Tensor& logits, const SamplingParams& p,
                                                    at::Generator& gen) {
  return sample_with_noise(logits, p, sampling_noise(logits.size(0), logits.size(-1), logits.device(), p.temperature, gen));
}

namespace detail {

bool TokenSink::append(int64_t b, int64_t t, float lp, bool last_step) {
  Completion& c = out[b];
  c.tokens.push_back(t);
  c.logprobs.push_back(lp);
  if (decoders) {
    const std::string piece = (*decoders)[b].push(static_cast<TokenId>(t));
    const size_t from = c.text.size() > max_stop_len ? c.text.size() - max_stop_len : 0;
    c.text += piece;
    bool stopped = false;
    if (!piece.empty())
      for (const auto& s : params.stop_strings)
        if (!s.empty() && c.text.find(s, from) != std::string::npos) stopped = true;
    if (stopped) {
      c.finish = FinishReason::StopString;
      return true;
    }
  }
  if (std::find(params.stop_ids.begin(), params.stop_ids.end(), t) != params.stop_ids.end()) {
    c.finish = FinishReason::StopToken;
    return true;
  }
  if (last_step) {
    c.finish = FinishReason::Length;
    return true;
  }
  return false;
}

}  // namespace detail

using detail::PromptBatch;
using detail::TokenSink;

namespace {

/// Checks the prompts (non-empty, every id in the vocabulary of `V`) and left-pads them.
/// Throws ModelError naming the problem.
PromptBatch left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t V, const torch::Device& dev) {
  const int64_t B = static_cast<int64_t>(prompts.size());
  int64_t P = 0, minlen = std::numeric_limits<int64_t>::max();
  for (const auto& pr : prompts) {
    if (pr.empty()) throw ModelError("generate: empty prompt");
    P = std::max<int64_t>(P, pr.size());
    minlen = std::min<int64_t>(minlen, pr.size());
  }
  for (const auto& pr : prompts)
    for (auto t : pr)
      if (t < 0 || t >= V) throw ModelError("generate: token id " + std::to_string(t) + " outside the vocabulary");
  PromptBatch pb;
  auto ids = torch::zeros({B, P}, torch::kInt64);
  auto am = torch::zeros({B, P}, torch::kInt64);
  pb.next_pos.resize(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = prompts[b].size();
    auto a = ids[b];
    for (int64_t i = 0; i < n; ++i) a[P - n + i] = prompts[b][i];
    am[b].narrow(0, P - n, n).fill_(1);
    pb.next_pos[b] = n;
  }
  pb.ids = ids.to(dev);
  pb.attention_mask = am.to(dev);
  pb.P = P;
  pb.padded = minlen != P;
  return pb;
}

/// Rows that share a prompt (share_prefill): prefilled once. unique_of[b] is row b's distinct
/// prompt, unique_rows[u] the first row holding prompt u.
struct PrefillGroups {
  std::vector<int64_t> unique_of, unique_rows;
  bool shared() const { return unique_rows.size() < unique_of.size(); }
};

PrefillGroups group_prompts(const std::vector<std::vector<int64_t>>& prompts, bool share_prefill) {
  const int64_t B = static_cast<int64_t>(prompts.size());
  PrefillGroups g;
  g.unique_of.resize(static_cast<size_t>(B));
  std::map<std::vector<int64_t>, int64_t> seen;
  for (int64_t b = 0; b < B; ++b) {
    auto [it, fresh] = seen.emplace(share_prefill ? prompts[b] : std::vector<int64_t>{b}, 0);
    if (fresh) {
      it->second = static_cast<int64_t>(g.unique_rows.size());
      g.unique_rows.push_back(b);
    }
    g.unique_of[b] = it->second;
  }
  return g;
}

/// Prefill: each distinct prompt once into `cache` (made for the distinct prompts), then every
/// row gets a copy of its prompt's cache rows. Returns the last position's logits [B, V] fp32.
torch::Tensor prefill(Transformer& model, const PromptBatch& pb, const PrefillGroups& g, const torch::Tensor& key_mask,
                      KVCache& cache) {
  const auto dev = model->device();
  const int64_t P = pb.P;
  if (!g.shared()) {
    auto hidden = model->forward(pb.ids, positions_from_mask(pb.attention_mask),
                                 pb.padded ? key_mask.narrow(1, 0, P) : torch::Tensor(), &cache);
    return model->logits(hidden.select(1, P - 1)).to(torch::kFloat32);
  }
  auto pick = torch::tensor(g.unique_rows, torch::kInt64).to(dev);
  auto uam = pb.attention_mask.index_select(0, pick);
  auto hidden = model->forward(pb.ids.index_select(0, pick), positions_from_mask(uam),
                               pb.padded ? key_mask.narrow(1, 0, P).index_select(0, pick) : torch::Tensor(), &cache);
  auto expand = torch::tensor(g.unique_of, torch::kInt64).to(dev);
  cache.select_rows(expand);
  return model->logits(hidden.select(1, P - 1)).to(torch::kFloat32).index_select(0, expand);
}

/// The rows still decoding: batch row -> original prompt index (on the host, and on the device
/// to pick their sampling noise), and each row's next position.
struct ActiveRows {
  std::vector<int64_t> index, next_pos;
  torch::Tensor index_dev;  ///< undefined while every row decodes
};

/// Keeps only batch rows `keep` of the cache, the next tokens [rows], the key mask and `rows`.
void keep_rows(const std::vector<int64_t>& keep, const torch::Device& dev, KVCache& cache, torch::Tensor& next,
               torch::Tensor& key_mask, ActiveRows& rows) {
  auto pick = torch::tensor(keep, torch::kInt64).to(dev);
  cache.select_rows(pick);
  next = next.index_select(0, pick);
  if (key_mask.defined()) key_mask = key_mask.index_select(0, pick);
  ActiveRows kept;
  for (auto r : keep) {
    kept.index.push_back(rows.index[r]);
    kept.next_pos.push_back(rows.next_pos[r]);
  }
  kept.index_dev = torch::tensor(kept.index, torch::kInt64).to(dev);
  rows = std::move(kept);
}

/// The dynamic decode loop (DecodeMode::Dynamic): sample, append (stop checks), drop finished
/// rows, one forward per step. `logits` [B, V] fp32 are the prefill's.
void decode_dynamic(Transformer& model, const PromptBatch& pb, KVCache& cache, torch::Tensor key_mask,
                    torch::Tensor logits, const SamplingParams& params, TokenSink& sink, at::Generator& gen) {
  const auto dev = model->device();
  const int64_t B = logits.size(0), V = logits.size(1);
  ActiveRows rows;
  for (int64_t b = 0; b < B; ++b) rows.index.push_back(b);
  rows.next_pos = pb.next_pos;
  for (int64_t step = 0; step < params.max_new_tokens; ++step) {
    auto noise = sampling_noise(B, V, dev, params.temperature, gen);
    if (noise.defined() && rows.index_dev.defined()) noise = noise.index_select(0, rows.index_dev);
    auto [next, lp] = sample_with_noise(logits, params, noise);
    auto next_cpu = next.to(torch::kCPU);
    auto lp_cpu = lp.to(torch::kCPU);
    auto nacc = next_cpu.accessor<int64_t, 1>();
    auto lacc = lp_cpu.accessor<float, 1>();
    std::vector<int64_t> keep;
    for (size_t r = 0; r < rows.index.size(); ++r)
      if (!sink.append(rows.index[r], nacc[r], lacc[r], step + 1 == params.max_new_tokens))
        keep.push_back(static_cast<int64_t>(r));
    if (keep.empty()) break;
    if (keep.size() != rows.index.size()) keep_rows(keep, dev, cache, next, key_mask, rows);
    auto pos = torch::tensor(rows.next_pos, torch::kInt64).to(dev).unsqueeze(1);
    for (auto& p : rows.next_pos) ++p;
    const int64_t S = cache.length + 1;
    auto hidden = model->forward(next.unsqueeze(1), pos, pb.padded ? key_mask.narrow(1, 0, S) : torch::Tensor(), &cache);
    logits = model->logits(hidden.select(1, 0)).to(torch::kFloat32);
  }
}

/// The decode mode `params` asks for on `model`, Auto resolved; throws ModelError for Graph off
/// a GPU or under autocast.
DecodeMode decode_mode(const Transformer& model, const SamplingParams& params, bool cast) {
  const bool cuda = model->device().is_cuda();
  switch (params.decode) {
    case DecodeMode::Auto: return !cuda ? DecodeMode::Dynamic : cast ? DecodeMode::Static : DecodeMode::Graph;
    case DecodeMode::Graph:
      if (!cuda) throw ModelError("generate: decode mode 'graph' needs a model on a CUDA device");
      if (cast)
        throw ModelError("generate: decode mode 'graph' needs the compute dtype to be the weights' dtype "
                         "(an autocast cast of every weight would be replayed at every step); use a rollout copy "
                         "(model/rollout_weights.hpp) or decode mode 'static'");
      return DecodeMode::Graph;
    default: return params.decode;
  }
}

}  // namespace

std::vector<Completion> generate(Transformer& model, const std::vector<std::vector<int64_t>>& prompts,
                                 const SamplingParams& params, const Tokenizer* tok) {
  torch::NoGradGuard ng;
  const int64_t B = static_cast<int64_t>(prompts.size());
  std::vector<Completion> out(B);
  if (B == 0 || params.max_new_tokens <= 0) return out;
  if (!params.stop_strings.empty() && tok == nullptr) throw ModelError("generate: stop strings need a tokenizer");
  if (params.window_block < 1) throw ModelError("generate: window_block must be at least 1");
  const auto dev = model->device();

  // 1. The batch: prompts left-padded, a key mask over prompt and completion when padded.
  PromptBatch pb = left_pad(prompts, model->config().vocab_size, dev);
  const int64_t total = pb.P + params.max_new_tokens;
  torch::Tensor key_mask;
  if (pb.padded) {
    key_mask = torch::ones({B, total}, torch::TensorOptions().dtype(torch::kBool).device(dev));
    key_mask.narrow(1, 0, pb.P).copy_(pb.attention_mask.to(torch::kBool));
  }

  // 2. The compute dtype: autocast on the model's device type for every forward below, and a KV
  // cache of that dtype.
  const bool cast = params.compute_dtype != c10::ScalarType::Undefined && params.compute_dtype != model->dtype();
  std::optional<AutocastScope> autocast;
  if (cast) autocast.emplace(AutocastState::enabled(dev.type(), params.compute_dtype));
  const DecodeMode mode = decode_mode(model, params, cast);

  // 3. Prefill, each distinct prompt once.
  const PrefillGroups groups = group_prompts(prompts, params.share_prefill);
  KVCache cache = model->make_cache(static_cast<int64_t>(groups.unique_rows.size()), total,
                                    cast ? params.compute_dtype : c10::ScalarType::Undefined);
  torch::Tensor logits = prefill(model, pb, groups, key_mask, cache);

  // 4. Decode, dynamic (finished rows dropped) or with static shapes (finished rows masked).
  auto gen = at::globalContext().defaultGenerator(dev).clone();
  gen.set_current_seed(params.seed);
  std::vector<StreamDecoder> decoders;
  if (tok)
    for (int64_t b = 0; b < B; ++b) decoders.emplace_back(*tok);
  TokenSink sink{out, tok ? &decoders : nullptr, params};
  for (auto& s : params.stop_strings) sink.max_stop_len = std::max(sink.max_stop_len, s.size());
  if (mode == DecodeMode::Dynamic)
    decode_dynamic(model, pb, cache, key_mask, logits, params, sink, gen);
  else
    detail::decode_static(model, pb, cache, logits, params, mode == DecodeMode::Graph,
                          params.decode == DecodeMode::Auto, sink, gen);
  if (tok)
    for (int64_t b = 0; b < B; ++b) out[b].text += decoders[b].flush();
  return out;
}

}  // namespace leap::model
