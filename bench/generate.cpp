// bench_generate: tokens per second of leap's batched sampling on a checkpoint folder.
// Usage: bench_generate MODEL_DIR [--batch 1,16] [--new-tokens 128] [--prompt-len 16]
//                       [--device cpu|cuda] [--dtype fp32|bf16] [--repeats 1] [--serve 0|1]
//                       [--decode auto|dynamic|static|graph] [--fuse 0|1]
//                       [--compare MODE_A,MODE_B --pairs 3] [--bandwidth-gbs 0] [--ragged-batch B]
// Prints one line per batch size: "leap batch=B new_tokens=N seconds=S tokens_per_s=T".
// --compare: per batch size, the two decode modes run alternately (A B A B ..., after one warm-up
// pair) and one line gives each side's median tokens/s and the median of the per-pair ratios
// B/A with its range. --bandwidth-gbs: also the share of the memory-bandwidth bound (each decode
// step reads the weights and the KV cache of its rows at the mean context). --ragged-batch B: one
// more compare line at batch B with prompts of different lengths (from prompt-len down to half of
// it: left padding, a key mask in every forward). --fuse 1: q/k/v and
// gate/up fused (as the rollout copy). --serve 1: loads the model once, then reads one batch
// size per line on stdin and answers each with one timed run's line (tools/bench_generate.py
// alternates it with transformers that way).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "model/generate.hpp"
#include "model/transformer.hpp"
#include "pairs.hpp"

using namespace leap::model;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: bench_generate MODEL_DIR [--batch 1,16] [--new-tokens 128] [--prompt-len 16] "
                 "[--device cpu|cuda] [--dtype fp32|bf16] [--repeats 1]\n";
    return 2;
  }
  std::string dir = argv[1], batches = "1,16", device = "cpu", dtype = "fp32", decode = "auto", compare;
  int64_t new_tokens = 128, prompt_len = 16, repeats = 1, pairs = 3, ragged_batch = 0;
  double bandwidth_gbs = 0;
  bool serve = false, fuse = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--batch") batches = v;
    else if (k == "--new-tokens") new_tokens = std::stoll(v);
    else if (k == "--prompt-len") prompt_len = std::stoll(v);
    else if (k == "--device") device = v;
    else if (k == "--dtype") dtype = v;
    else if (k == "--repeats") repeats = std::stoll(v);
    else if (k == "--serve") serve = v == "1";
    else if (k == "--decode") decode = v;
    else if (k == "--fuse") fuse = v == "1";
    else if (k == "--compare") compare = v;
    else if (k == "--pairs") pairs = std::stoll(v);
    else if (k == "--bandwidth-gbs") bandwidth_gbs = std::stod(v);
    else if (k == "--ragged-batch") ragged_batch = std::stoll(v);
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  try {
    const torch::Device dev = device == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
    auto model = load_transformer(dir, dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32, dev);
    if (fuse) model->fuse_projections();
    const int64_t V = model->config().vocab_size;
    // B prompts of prompt_len tokens, or (ragged) of lengths from prompt_len down to half of it.
    const auto prompts_of = [&](int64_t B, bool ragged = false) {
      std::vector<std::vector<int64_t>> prompts(B);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t n = ragged ? prompt_len - (b % 8) * prompt_len / 16 : prompt_len;
        for (int64_t t = 0; t < n; ++t) prompts[b].push_back((b * 7919 + t * 104729 + 17) % V);
      }
      return prompts;
    };
    const auto params_of = [&](const std::string& mode) {
      SamplingParams p;
      p.temperature = 1.0;
      p.max_new_tokens = new_tokens;
      p.seed = 1;
      p.stop_ids = {};  // every row makes new_tokens tokens
      p.decode = mode == "dynamic" ? DecodeMode::Dynamic
                 : mode == "static" ? DecodeMode::Static
                 : mode == "graph"  ? DecodeMode::Graph
                                    : DecodeMode::Auto;
      return p;
    };
    // One generate() at batch B in `mode`: seconds and tokens made.
    const auto timed = [&](const std::vector<std::vector<int64_t>>& prompts, const std::string& mode, int64_t* made) {
      if (dev.is_cuda()) torch::cuda::synchronize();
      const double t0 = leap::bench::now_s();
      auto out = generate(model, prompts, params_of(mode));
      if (dev.is_cuda()) torch::cuda::synchronize();
      const double s = leap::bench::now_s() - t0;
      *made = 0;
      for (auto& c : out) *made += static_cast<int64_t>(c.tokens.size());
      return s;
    };
    // The bandwidth bound at batch B: every decode step reads the weights and B rows of KV cache
    // at the mean context (prompt + half the new tokens). Tokens per second.
    const auto bound = [&](int64_t B) {
      const auto& c = model->config();
      double weight_bytes = 0;
      for (auto& p : model->parameters()) weight_bytes += static_cast<double>(p.numel() * p.element_size());
      const double kv_bytes = 2.0 * c.num_hidden_layers * B * c.num_key_value_heads * c.head_dim *
                              (prompt_len + new_tokens / 2.0) * (dtype == "bf16" ? 2 : 4);
      return B / ((weight_bytes + kv_bytes) / (bandwidth_gbs * 1e9));
    };
    if (!compare.empty()) {
      const auto comma = compare.find(',');
      const std::string a = compare.substr(0, comma), b = compare.substr(comma + 1);
      std::stringstream ss(batches);
      std::string item;
      std::vector<std::pair<int64_t, bool>> runs;  // (batch, ragged)
      while (std::getline(ss, item, ',')) runs.emplace_back(std::stoll(item), false);
      if (ragged_batch > 0) runs.emplace_back(ragged_batch, true);
      for (const auto& [B, ragged] : runs) {
        const auto prompts = prompts_of(B, ragged);
        int64_t made_a = 0, made_b = 0;
        auto pr = leap::bench::alternate([&] { return timed(prompts, a, &made_a); },
                                         [&] { return timed(prompts, b, &made_b); }, static_cast<int>(pairs));
        const double tps_a = made_a / leap::bench::median(pr.a_s), tps_b = made_b / leap::bench::median(pr.b_s);
        std::printf("compare batch=%lld prompt=%lld%s new_tokens=%lld %s tokens_per_s=%.1f %s tokens_per_s=%.1f "
                    "seconds ratio %s/%s %s",
                    static_cast<long long>(B), static_cast<long long>(prompt_len), ragged ? " (ragged)" : "",
                    static_cast<long long>(new_tokens),
                    a.c_str(), tps_a, b.c_str(), tps_b, b.c_str(), a.c_str(), pr.summary().c_str());
        if (bandwidth_gbs > 0)
          std::printf(" bound_tokens_per_s=%.0f share %s=%.1f%% %s=%.1f%%", bound(B), a.c_str(), 100 * tps_a / bound(B),
                      b.c_str(), 100 * tps_b / bound(B));
        std::printf("\n");
        std::fflush(stdout);
      }
      return 0;
    }
    // One timed run at batch B (after a short warm-up at that batch): seconds and tokens made.
    auto run = [&](int64_t B, int64_t reps) {
      const auto prompts = prompts_of(B);
      SamplingParams p = params_of(decode);
      SamplingParams warm = p;
      warm.max_new_tokens = 4;
      generate(model, prompts, warm);  // warm-up
      double best = 1e30;
      int64_t produced = 0;
      for (int64_t r = 0; r < reps; ++r) {
        if (dev.is_cuda()) torch::cuda::synchronize();
        auto t0 = std::chrono::steady_clock::now();
        auto out = generate(model, prompts, p);
        if (dev.is_cuda()) torch::cuda::synchronize();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        produced = 0;
        for (auto& c : out) produced += static_cast<int64_t>(c.tokens.size());
        best = std::min(best, s);
      }
      std::printf("leap batch=%lld new_tokens=%lld seconds=%.3f tokens_per_s=%.1f\n", static_cast<long long>(B),
                  static_cast<long long>(new_tokens), best, produced / best);
      std::fflush(stdout);
    };
    if (serve) {
      std::string line;
      while (std::getline(std::cin, line))
        if (!line.empty()) run(std::stoll(line), 1);
      return 0;
    }
    std::stringstream ss(batches);
    std::string item;
    while (std::getline(ss, item, ',')) run(std::stoll(item), repeats);
  } catch (const std::exception& e) {
    std::cerr << "bench_generate: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
