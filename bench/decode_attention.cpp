// bench_decode_attention: the CPU decode-step attention kernel (model/decode_attention.hpp)
// against PyTorch's SDPA on the same inputs, alternating the two sides (SDPA first in each pair).
// Usage: bench_decode_attention [--pairs 7] [--reps 200]
// Shapes: the tiny preset's (4 query heads, 2 key/value heads, head size 32) at batch 1, 16 and
// 64 with 80 keys in a 144-position cache, and Qwen2.5-1.5B's (12 / 2 heads, 128) at batch 16.
// Prints per shape: microseconds per call of each side (medians) and the median kernel / SDPA
// time ratio with its min and max.
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "model/decode_attention.hpp"
#include "pairs.hpp"

int main(int argc, char** argv) {
  int pairs = 7, reps = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--pairs") pairs = std::stoi(argv[i + 1]);
    else if (k == "--reps") reps = std::stoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      return 2;
    }
  }
  torch::NoGradGuard ng;
  struct Shape {
    int64_t B, H, Hkv, S, D, L;
  };
  for (const Shape& s : {Shape{1, 4, 2, 80, 32, 144}, Shape{16, 4, 2, 80, 32, 144}, Shape{64, 4, 2, 80, 32, 144},
                         Shape{16, 12, 2, 600, 128, 1024}}) {
    auto q = torch::randn({s.B, s.H, 1, s.D});
    auto k = torch::randn({s.B, s.Hkv, s.L, s.D}).narrow(2, 0, s.S);
    auto v = torch::randn({s.B, s.Hkv, s.L, s.D}).narrow(2, 0, s.S);
    auto time = [&](auto&& f) {
      const double t0 = leap::bench::now_s();
      for (int r = 0; r < reps; ++r) f();
      return (leap::bench::now_s() - t0) / reps;
    };
    auto sdpa = [&] {
      return time([&] { at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, false, std::nullopt, true); });
    };
    auto kernel = [&] { return time([&] { leap::model::decode_attention_cpu(q, k, v, {}); }); };
    auto p = leap::bench::alternate(sdpa, kernel, pairs);
    std::printf("B=%lld H=%lld Hkv=%lld S=%lld D=%lld: sdpa %.1f us, kernel %.1f us; kernel/sdpa %s\n",
                static_cast<long long>(s.B), static_cast<long long>(s.H), static_cast<long long>(s.Hkv),
                static_cast<long long>(s.S), static_cast<long long>(s.D), leap::bench::median(p.a_s) * 1e6,
                leap::bench::median(p.b_s) * 1e6, p.summary().c_str());
    std::fflush(stdout);
  }
  return 0;
}
