// The CPU decode-step attention kernel against PyTorch's SDPA and a plain matmul reference.
#include <doctest/doctest.h>

#include <torch/torch.h>

#include "model/decode_attention.hpp"

using namespace leap::model;

TEST_SUITE_BEGIN("model");

namespace {

// softmax(q k^T / sqrt(D) masked) v with the key/value heads repeated per query head, in float64.
torch::Tensor naive_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& mask) {
  const int64_t group = q.size(1) / k.size(1);
  auto kk = k.to(torch::kFloat64).repeat_interleave(group, 1);
  auto vv = v.to(torch::kFloat64).repeat_interleave(group, 1);
  auto s = torch::matmul(q.to(torch::kFloat64), kk.transpose(-1, -2)) / std::sqrt(static_cast<double>(q.size(3)));
  if (mask.defined()) s = s.masked_fill(mask.logical_not(), -std::numeric_limits<double>::infinity());
  return torch::matmul(s.softmax(-1), vv).to(torch::kFloat32);
}

}  // namespace

TEST_CASE("model: decode attention on the CPU equals SDPA and a float64 reference (GQA, masks, cache views)") {
  torch::manual_seed(7);
  struct Shape {
    int64_t B, H, Hkv, S, D, max_len;
  };
  for (const Shape& sh : {Shape{1, 4, 2, 1, 32, 8}, Shape{3, 4, 2, 17, 32, 40}, Shape{64, 4, 2, 80, 32, 144},
                          Shape{5, 12, 2, 33, 128, 64}, Shape{2, 6, 6, 9, 8, 9}, Shape{4, 8, 1, 300, 64, 310}}) {
    CAPTURE(sh.B);
    CAPTURE(sh.H);
    CAPTURE(sh.Hkv);
    CAPTURE(sh.S);
    CAPTURE(sh.D);
    auto q = torch::randn({sh.B, sh.H, 1, sh.D});
    // k and v as generate() hands them: the first S positions of a longer cache.
    auto kc = torch::randn({sh.B, sh.Hkv, sh.max_len, sh.D}) * 2;
    auto vc = torch::randn({sh.B, sh.Hkv, sh.max_len, sh.D});
    auto k = kc.narrow(2, 0, sh.S), v = vc.narrow(2, 0, sh.S);
    for (int masked = 0; masked < 3; ++masked) {
      CAPTURE(masked);
      torch::Tensor mask;
      if (masked == 1) {  // per row: random keys off, the last (the new token's own) always on
        mask = torch::rand({sh.B, 1, 1, sh.S}) < 0.6;
        mask.narrow(3, sh.S - 1, 1).fill_(true);
      } else if (masked == 2) {  // one mask broadcast over the rows
        mask = torch::rand({1, 1, 1, sh.S}) < 0.5;
        mask.narrow(3, 0, 1).fill_(true);
      }
      REQUIRE(decode_attention_supported(q, k, v, mask));
      auto got = decode_attention_cpu(q, k, v, mask);
      REQUIRE(got.sizes() == q.sizes());
      auto ref = naive_attention(q, k, v, mask.defined() ? mask.expand({sh.B, 1, 1, sh.S}) : mask);
      CHECK(torch::allclose(got, ref, 1e-5, 1e-5));
      auto sdpa = at::scaled_dot_product_attention(q, k, v, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt,
                                                   0.0, false, std::nullopt, sh.H != sh.Hkv);
      CHECK(torch::allclose(got, sdpa, 1e-5, 1e-5));
    }
  }
}

TEST_CASE("model: decode attention: a row with every key masked gets zeros, other inputs are refused") {
  auto q = torch::randn({2, 4, 1, 16});
  auto k = torch::randn({2, 2, 5, 16}), v = torch::randn({2, 2, 5, 16});
  auto mask = torch::ones({2, 1, 1, 5}, torch::kBool);
  mask[1].fill_(false);
  auto out = decode_attention_cpu(q, k, v, mask);
  CHECK(out[1].abs().max().item<float>() == 0.0f);
  CHECK(torch::allclose(out[0], naive_attention(q, k, v, mask)[0], 1e-5, 1e-5));
  // Not for: bf16, two query positions, a head size that is not a multiple of 8, heads that do
  // not group, a float mask, a mask with a query dimension.
  CHECK_FALSE(decode_attention_supported(q.to(torch::kBFloat16), k.to(torch::kBFloat16), v.to(torch::kBFloat16), {}));
  CHECK_FALSE(decode_attention_supported(torch::randn({2, 4, 2, 16}), k, v, {}));
  CHECK_FALSE(decode_attention_supported(torch::randn({2, 4, 1, 12}), torch::randn({2, 2, 5, 12}),
                                         torch::randn({2, 2, 5, 12}), {}));
  CHECK_FALSE(decode_attention_supported(torch::randn({2, 3, 1, 16}), k, v, {}));
  CHECK_FALSE(decode_attention_supported(q, k, v, torch::ones({2, 1, 1, 5})));
  CHECK_FALSE(decode_attention_supported(q, k, v, torch::ones({2, 1, 2, 5}, torch::kBool)));
  CHECK_THROWS(decode_attention_cpu(torch::randn({2, 4, 2, 16}), k, v, {}));
}

TEST_SUITE_END();
