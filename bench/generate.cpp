// bench_generate: tokens per second of leap's batched sampling on a checkpoint folder.
// Usage: bench_generate MODEL_DIR [--batch 1,16] [--new-tokens 128] [--prompt-len 16]
//                       [--device cpu|cuda] [--dtype fp32|bf16] [--repeats 1] [--serve 0|1]
// Prints one line per batch size: "leap batch=B new_tokens=N seconds=S tokens_per_s=T".
// --serve 1: loads the model once, then reads one batch size per line on stdin and answers each
// with one timed run's line (tools/bench_generate.py alternates it with transformers that way).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "model/generate.hpp"
#include "model/transformer.hpp"

using namespace leap::model;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: bench_generate MODEL_DIR [--batch 1,16] [--new-tokens 128] [--prompt-len 16] "
                 "[--device cpu|cuda] [--dtype fp32|bf16] [--repeats 1]\n";
    return 2;
  }
  std::string dir = argv[1], batches = "1,16", device = "cpu", dtype = "fp32";
  int64_t new_tokens = 128, prompt_len = 16, repeats = 1;
  bool serve = false;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--batch") batches = v;
    else if (k == "--new-tokens") new_tokens = std::stoll(v);
    else if (k == "--prompt-len") prompt_len = std::stoll(v);
    else if (k == "--device") device = v;
    else if (k == "--dtype") dtype = v;
    else if (k == "--repeats") repeats = std::stoll(v);
    else if (k == "--serve") serve = v == "1";
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  try {
    const torch::Device dev = device == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
    auto model = load_transformer(dir, dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32, dev);
    const int64_t V = model->config().vocab_size;
    // One timed run at batch B (after a short warm-up at that batch): seconds and tokens made.
    auto run = [&](int64_t B, int64_t reps) {
      std::vector<std::vector<int64_t>> prompts(B);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < prompt_len; ++t) prompts[b].push_back((b * 7919 + t * 104729 + 17) % V);
      SamplingParams p;
      p.temperature = 1.0;
      p.max_new_tokens = new_tokens;
      p.seed = 1;
      generate(model, prompts, SamplingParams{.temperature = 1.0, .max_new_tokens = 4});  // warm-up
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
