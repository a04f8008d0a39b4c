#include "model/generate.hpp"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <limits>
#include <map>

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

std::pair<torch::Tensor, torch::Tensor> sample_next(const torch::Tensor& logits, const SamplingParams& p,
                                                    at::Generator& gen) {
  if (p.temperature <= 0) {
    auto next = logits.argmax(-1);
    auto lp = torch::log_softmax(logits, -1).gather(-1, next.unsqueeze(-1)).squeeze(-1);
    return {next, lp};
  }
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
  // Inverse-CDF sampling: one uniform per row against the cumulative probabilities (float64),
  // instead of multinomial's exponential variate per vocabulary entry ([B, V] random numbers
  // and logarithms per token, an eighth of a tiny model's decode step). A token of probability 0
  // (cut by top-k / top-p) spans an empty interval of the CDF and is never drawn.
  auto cdf = l.softmax(-1).to(torch::kFloat64).cumsum(-1);
  auto u = at::rand({cdf.size(0), 1}, gen, cdf.options()) * cdf.narrow(-1, cdf.size(-1) - 1, 1);
  auto next = torch::searchsorted(cdf, u, /*out_int32=*/false, /*right=*/true).squeeze(-1).clamp_max(cdf.size(-1) - 1);
  auto lp = lsm.gather(-1, next.unsqueeze(-1)).squeeze(-1);
  return {next, lp};
}

std::vector<Completion> generate(Transformer& model, const std::vector<std::vector<int64_t>>& prompts,
                                 const SamplingParams& params, const Tokenizer* tok) {
  torch::NoGradGuard ng;
  const int64_t B = static_cast<int64_t>(prompts.size());
  std::vector<Completion> out(B);
  if (B == 0 || params.max_new_tokens <= 0) return out;
  if (!params.stop_strings.empty() && tok == nullptr)
    throw ModelError("generate: stop strings need a tokenizer");
  int64_t P = 0, minlen = std::numeric_limits<int64_t>::max();
  for (const auto& pr : prompts) {
    if (pr.empty()) throw ModelError("generate: empty prompt");
    P = std::max<int64_t>(P, pr.size());
    minlen = std::min<int64_t>(minlen, pr.size());
  }
  const auto dev = model->device();
  const int64_t V = model->config().vocab_size;
  for (const auto& pr : prompts)
    for (auto t : pr)
      if (t < 0 || t >= V) throw ModelError("generate: token id " + std::to_string(t) + " outside the vocabulary");

  auto ids = torch::zeros({B, P}, torch::kInt64);
  auto am = torch::zeros({B, P}, torch::kInt64);
  std::vector<int64_t> next_pos(B);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = prompts[b].size();
    auto a = ids[b];
    for (int64_t i = 0; i < n; ++i) a[P - n + i] = prompts[b][i];
    am[b].narrow(0, P - n, n).fill_(1);
    next_pos[b] = n;
  }
  ids = ids.to(dev);
  am = am.to(dev);
  const bool padded = minlen != P;
  const int64_t total = P + params.max_new_tokens;
  // The compute dtype: autocast on the model's device type for every forward below, and a KV
  // cache of that dtype.
  const bool cast = params.compute_dtype != c10::ScalarType::Undefined && params.compute_dtype != model->dtype();
  const c10::DeviceType dtype_dev = dev.type();
  const bool was_on = at::autocast::is_autocast_enabled(dtype_dev);
  const c10::ScalarType was_dtype = at::autocast::get_autocast_dtype(dtype_dev);
  struct Restore {
    bool active;
    c10::DeviceType d;
    bool on;
    c10::ScalarType t;
    ~Restore() {
      if (!active) return;
      at::autocast::set_autocast_enabled(d, on);
      at::autocast::set_autocast_dtype(d, t);
      at::autocast::clear_cache();
    }
  } restore{cast, dtype_dev, was_on, was_dtype};
  if (cast) {
    at::autocast::set_autocast_enabled(dtype_dev, true);
    at::autocast::set_autocast_dtype(dtype_dev, params.compute_dtype);
  }
  // Prefill: each distinct prompt once, then every row gets a copy of its prompt's cache rows.
  std::vector<int64_t> unique_of(B), unique_rows;
  {
    std::map<std::vector<int64_t>, int64_t> seen;
    for (int64_t b = 0; b < B; ++b) {
      auto [it, fresh] = seen.emplace(params.share_prefill ? prompts[b] : std::vector<int64_t>{b}, 0);
      if (fresh) {
        it->second = static_cast<int64_t>(unique_rows.size());
        unique_rows.push_back(b);
      }
      unique_of[b] = it->second;
    }
  }
  const int64_t U = static_cast<int64_t>(unique_rows.size());
  const bool shared = U < B;
  torch::Tensor key_mask;
  if (padded) {
    key_mask = torch::ones({B, total}, torch::TensorOptions().dtype(torch::kBool).device(dev));
    key_mask.narrow(1, 0, P).copy_(am.to(torch::kBool));
  }
  KVCache cache = model->make_cache(U, total, cast ? params.compute_dtype : c10::ScalarType::Undefined);
  torch::Tensor logits;
  if (shared) {
    auto pick = torch::tensor(unique_rows, torch::kInt64).to(dev);
    auto uam = am.index_select(0, pick);
    auto hidden = model->forward(ids.index_select(0, pick), positions_from_mask(uam),
                                 padded ? key_mask.narrow(1, 0, P).index_select(0, pick) : torch::Tensor(), &cache);
    auto expand = torch::tensor(unique_of, torch::kInt64).to(dev);
    cache.select_rows(expand);
    logits = model->logits(hidden.select(1, P - 1)).to(torch::kFloat32).index_select(0, expand);
  } else {
    auto hidden = model->forward(ids, positions_from_mask(am), padded ? key_mask.narrow(1, 0, P) : torch::Tensor(), &cache);
    logits = model->logits(hidden.select(1, P - 1)).to(torch::kFloat32);
  }

  auto gen = at::globalContext().defaultGenerator(dev).clone();
  gen.set_current_seed(params.seed);
  std::vector<int64_t> active(B);  // row -> original index
  for (int64_t b = 0; b < B; ++b) active[b] = b;
  std::vector<StreamDecoder> decoders;
  if (tok)
    for (int64_t b = 0; b < B; ++b) decoders.emplace_back(*tok);
  size_t max_stop_len = 0;
  for (auto& s : params.stop_strings) max_stop_len = std::max(max_stop_len, s.size());

  for (int64_t step = 0; step < params.max_new_tokens; ++step) {
    auto [next, lp] = sample_next(logits, params, gen);
    auto next_cpu = next.to(torch::kCPU);
    auto lp_cpu = lp.to(torch::kCPU);
    auto nacc = next_cpu.accessor<int64_t, 1>();
    auto lacc = lp_cpu.accessor<float, 1>();
    std::vector<int64_t> keep;
    for (size_t r = 0; r < active.size(); ++r) {
      auto& c = out[active[r]];
      const int64_t t = nacc[r];
      c.tokens.push_back(t);
      c.logprobs.push_back(lacc[r]);
      bool done = false;
      if (tok) {
        const std::string piece = decoders[active[r]].push(static_cast<TokenId>(t));
        const size_t from = c.text.size() > max_stop_len ? c.text.size() - max_stop_len : 0;
        c.text += piece;
        if (!piece.empty())
          for (const auto& s : params.stop_strings)
            if (!s.empty() && c.text.find(s, from) != std::string::npos) {
              done = true;
              c.finish = FinishReason::StopString;
            }
      }
      if (!done && std::find(params.stop_ids.begin(), params.stop_ids.end(), t) != params.stop_ids.end()) {
        done = true;
        c.finish = FinishReason::StopToken;
      }
      if (!done && step + 1 == params.max_new_tokens) {
        done = true;
        c.finish = FinishReason::Length;
      }
      if (!done) keep.push_back(static_cast<int64_t>(r));
    }
    if (keep.empty()) break;
    if (keep.size() != active.size()) {
      auto rows = torch::tensor(keep, torch::kInt64).to(dev);
      cache.select_rows(rows);
      next = next.index_select(0, rows);
      if (padded) key_mask = key_mask.index_select(0, rows);
      std::vector<int64_t> na, np;
      for (auto r : keep) {
        na.push_back(active[r]);
        np.push_back(next_pos[r]);
      }
      active = std::move(na);
      next_pos = std::move(np);
    }
    auto pos = torch::tensor(next_pos, torch::kInt64).to(dev).unsqueeze(1);
    for (auto& p : next_pos) ++p;
    const int64_t S = cache.length + 1;
    auto hidden = model->forward(next.unsqueeze(1), pos, padded ? key_mask.narrow(1, 0, S) : torch::Tensor(), &cache);
    logits = model->logits(hidden.select(1, 0)).to(torch::kFloat32);
  }
  if (tok)
    for (int64_t b = 0; b < B; ++b) out[b].text += decoders[b].flush();
  return out;
}

}  // namespace leap::model
