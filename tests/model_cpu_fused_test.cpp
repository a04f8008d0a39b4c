// The fused CPU inference kernels (RMSNorm, rotary) against the tensor-op formulas they replace.
#include <doctest/doctest.h>

#include <torch/torch.h>

#include "model/cpu_fused.hpp"

using namespace leap::model;

TEST_SUITE_BEGIN("model");

TEST_CASE("model: fused CPU RMSNorm equals the HF formula (float64 reference), any leading shape") {
  torch::manual_seed(3);
  for (auto shape : {std::vector<int64_t>{1, 1, 128}, {16, 1, 128}, {3, 7, 64}, {2, 5, 4, 32}, {9}}) {
    CAPTURE(shape.size());
    auto x = torch::randn(shape) * 3;
    auto w = torch::randn({shape.back()});
    const double eps = 1e-6;
    auto xd = x.to(torch::kFloat64);
    auto ref = (w.to(torch::kFloat64) * xd * torch::rsqrt(xd.pow(2).mean(-1, true) + eps)).to(torch::kFloat32);
    auto got = rms_norm_cpu(x, w, eps);
    CHECK(got.sizes() == x.sizes());
    CHECK(torch::allclose(got, ref, 1e-5, 1e-5));
  }
  // A non-contiguous input (a transposed view) gives the same values as its contiguous copy.
  auto x = torch::randn({4, 6, 32}).transpose(0, 1);
  auto w = torch::randn({32});
  CHECK(torch::equal(rms_norm_cpu(x, w, 1e-5), rms_norm_cpu(x.contiguous(), w, 1e-5)));
  CHECK_THROWS(rms_norm_cpu(x, torch::randn({31}), 1e-5));
  CHECK_THROWS(rms_norm_cpu(x.to(torch::kFloat64), w, 1e-5));
}

TEST_CASE("model: fused CPU rotary equals x * cos + rotate_half(x) * sin on strided inputs") {
  torch::manual_seed(4);
  const int64_t B = 3, H = 4, T = 5, D = 32;
  // x as the attention hands it over: [B, T, H, D] transposed to [B, H, T, D].
  auto x = torch::randn({B, T, H, D}).transpose(1, 2);
  auto ang = torch::randn({B, 1, T, D / 2}) * 4;
  auto cos = torch::cat({ang.cos(), ang.cos()}, -1), sin = torch::cat({ang.sin(), ang.sin()}, -1);
  auto rot = torch::cat({-x.narrow(-1, D / 2, D / 2), x.narrow(-1, 0, D / 2)}, -1);
  auto ref = x * cos + rot * sin;
  auto got = rotary_cpu(x, cos, sin);
  CHECK(got.sizes() == ref.sizes());
  CHECK(torch::allclose(got, ref, 1e-6, 1e-6));
  // Different cos/sin in the two halves are honoured too (the formula, not a shortcut).
  auto cos2 = torch::randn({B, 1, T, D}), sin2 = torch::randn({B, 1, T, D});
  CHECK(torch::allclose(rotary_cpu(x, cos2, sin2), x * cos2 + rot * sin2, 1e-5, 1e-5));
  CHECK_THROWS(rotary_cpu(x, cos.narrow(0, 0, 1), sin.narrow(0, 0, 1)));
  CHECK_THROWS(rotary_cpu(x.narrow(-1, 0, 31), torch::randn({B, 1, T, 31}), torch::randn({B, 1, T, 31})));
}

TEST_CASE("model: the fused CPU kernels are used only without gradients, on float32 CPU tensors") {
  auto x = torch::randn({2, 8});
  auto w = torch::randn({8}).requires_grad_(true);
  {
    torch::NoGradGuard ng;
    CHECK(cpu_fused_ok({&x, &w}));
  }
  CHECK_FALSE(cpu_fused_ok({&x, &w}));  // grad mode on and w wants a gradient
  auto wd = w.detach();
  CHECK(cpu_fused_ok({&x, &wd}));
  auto xb = x.to(torch::kBFloat16);
  CHECK_FALSE(cpu_fused_ok({&xb, &wd}));
  torch::Tensor undefined;
  CHECK(cpu_fused_ok({&x, &undefined}));
}

TEST_SUITE_END();
