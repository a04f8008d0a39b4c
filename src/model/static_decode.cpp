// generate()'s decode loop with static shapes (DecodeMode::Static and Graph, issue 48): a fixed
// batch and KV cache, finished rows masked, every per-step input updated in place on the device,
// so each step can be one CUDA graph replay.
#include <algorithm>
#include <functional>
#include <vector>

#include <spdlog/spdlog.h>

#include "model/cuda_decode.hpp"
#include "model/generate_internal.hpp"

namespace leap::model::detail {

namespace {

/// The inputs of one decode step, allocated once and updated in place (a captured graph reads
/// them at fixed addresses): the step's tokens and rotary positions [B, 1] int64, the cache
/// column it writes (int64 [1]) and the key mask [B, max_len] bool (prompt padding false, the
/// columns not yet written false).
struct StepInputs {
  torch::Tensor tokens, positions, column, key_mask;

  /// After the prefill of `pb`: positions and column one before the first decode step's.
  StepInputs(const PromptBatch& pb, int64_t B, int64_t max_len, const torch::Device& dev) {
    const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(dev);
    tokens = torch::zeros({B, 1}, i64);
    positions = torch::tensor(pb.next_pos, torch::kInt64).to(dev).view({B, 1}) - 1;
    column = torch::full({1}, pb.P - 1, i64);
    key_mask = torch::zeros({B, max_len}, i64.dtype(torch::kBool));
    key_mask.narrow(1, 0, pb.P).copy_(pb.attention_mask.to(torch::kBool));
  }

  /// The next step feeds `next` [B]: one position and one column further, that column unmasked.
  void advance(const torch::Tensor& next) {
    tokens.copy_(next.view_as(tokens));
    positions.add_(1);
    column.add_(1);
    key_mask.index_fill_(1, column, true);
  }
};

/// The attention window of a step that has `written` cache columns: rounded up to `block`, at
/// most `max_len`.
int64_t window_for(int64_t written, int64_t block, int64_t max_len) {
  return std::min(max_len, (written + block - 1) / block * block);
}

/// The step from `graph` for `window`. When capture or replay fails and `fallback` is set
/// (DecodeMode::Auto chose graphs), logs a warning once, sets *graphs false and runs the step
/// eagerly from then on (the inputs and the cache are unchanged by a failed capture: the step
/// only rewrites this step's column); else rethrows.
torch::Tensor graph_or_eager(DecodeGraph& graph, int64_t window, const std::function<at::Tensor(int64_t)>& step,
                             bool fallback, bool* graphs) {
  try {
    return graph.run(window, step);
  } catch (const std::exception& e) {
    if (!fallback) throw;
    spdlog::warn("generate: a CUDA graph of the decode step failed ({}); decoding on without graphs", e.what());
    *graphs = false;
    return step(window);
  }
}

}  // namespace

void decode_static(Transformer& model, const PromptBatch& pb, KVCache& cache, torch::Tensor logits,
                   const SamplingParams& params, bool graphs, bool graph_fallback, TokenSink& sink,
                   at::Generator& gen) {
  const auto dev = logits.device();
  const int64_t B = logits.size(0), V = logits.size(1), N = params.max_new_tokens, max_len = cache.max_len;
  // The columns past the prompt are read (masked) before they are written: zeros, never NaN.
  for (auto* side : {&cache.k, &cache.v})
    for (auto& t : *side) t.narrow(2, pb.P, max_len - pb.P).zero_();
  StepInputs in(pb, B, max_len, dev);
  const auto step_logits = [&](int64_t window) {
    auto hidden = model->decode_step(in.tokens, in.positions, in.key_mask, cache, in.column, window);
    return model->logits(hidden.select(1, 0)).to(torch::kFloat32);
  };
  DecodeGraph graph(dev);
  HostCopy host(B, dev);
  std::vector<char> done(static_cast<size_t>(B), 0);
  int64_t live = B;
  for (int64_t step = 0; step < N && live > 0; ++step) {
    // 1. Sample every row (finished ones too: same noise per row as the dynamic loop).
    auto [next, lp] = sample_with_noise(logits, params, sampling_noise(B, V, dev, params.temperature, gen));
    host.push(next, lp);
    // 2. Queue the next step before reading this one's tokens on the host.
    if (step + 1 < N) {
      in.advance(next);
      const int64_t window = window_for(pb.P + step + 1, params.window_block, max_len);
      logits = graphs ? graph_or_eager(graph, window, step_logits, graph_fallback, &graphs) : step_logits(window);
    }
    // 3. This step's tokens: append them, stop checks.
    auto [tokens, logprobs] = host.wait();
    const auto* t = tokens.data_ptr<int64_t>();
    const auto* l = logprobs.data_ptr<float>();
    for (int64_t b = 0; b < B; ++b)
      if (!done[b] && sink.append(b, t[b], l[b], step + 1 == N)) {
        done[b] = 1;
        --live;
      }
  }
}

}  // namespace leap::model::detail
