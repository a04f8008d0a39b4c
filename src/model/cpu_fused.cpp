#include "model/cpu_fused.hpp"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <c10/core/GradMode.h>

#include <cmath>

namespace leap::model {

bool cpu_fused_ok(std::initializer_list<const at::Tensor*> tensors) {
  const bool grad = c10::GradMode::is_enabled();
  for (const auto* t : tensors) {
    if (!t->defined()) continue;
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat) return false;
    if (grad && t->requires_grad()) return false;
  }
  return true;
}

at::Tensor rms_norm_cpu(const at::Tensor& x_in, const at::Tensor& weight_in, double eps) {
  TORCH_CHECK(x_in.dim() >= 1 && x_in.device().is_cpu() && x_in.scalar_type() == at::kFloat,
              "rms_norm_cpu: x must be a float32 CPU tensor");
  const int64_t N = x_in.size(-1);
  TORCH_CHECK(weight_in.dim() == 1 && weight_in.size(0) == N && weight_in.device().is_cpu() &&
                  weight_in.scalar_type() == at::kFloat,
              "rms_norm_cpu: weight must be float32 CPU [", N, "]");
  auto x = x_in.contiguous();
  auto w = weight_in.contiguous();
  auto out = at::empty(x.sizes(), x.options());
  const int64_t rows = N == 0 ? 0 : x.numel() / N;
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, N)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* xr = xp + r * N;
      float* orow = op + r * N;
      float ss = 0;
      for (int64_t i = 0; i < N; ++i) ss += xr[i] * xr[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(N) + static_cast<float>(eps));
      for (int64_t i = 0; i < N; ++i) orow[i] = wp[i] * (xr[i] * inv);
    }
  });
  return out;
}

at::Tensor rotary_cpu(const at::Tensor& x, const at::Tensor& cos_in, const at::Tensor& sin_in) {
  TORCH_CHECK(x.dim() == 4 && cos_in.dim() == 4 && sin_in.dim() == 4, "rotary_cpu: 4-d tensors expected");
  for (const auto* t : {&x, &cos_in, &sin_in})
    TORCH_CHECK(t->device().is_cpu() && t->scalar_type() == at::kFloat, "rotary_cpu: float32 CPU tensors expected");
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3);
  TORCH_CHECK(D % 2 == 0, "rotary_cpu: the last dimension must be even");
  for (const auto* t : {&cos_in, &sin_in})
    TORCH_CHECK(t->size(0) == B && t->size(1) == 1 && t->size(2) == T && t->size(3) == D,
                "rotary_cpu: cos/sin must be [B, 1, T, D]");
  auto c = cos_in.contiguous(), s = sin_in.contiguous();
  auto out = at::empty({B, H, T, D}, x.options());
  const int64_t half = D / 2;
  const int64_t xb = x.stride(0), xh = x.stride(1), xt = x.stride(2), xd = x.stride(3);
  const float* xp = x.data_ptr<float>();
  const float* cp = c.data_ptr<float>();
  const float* sp = s.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, B * H * T, std::max<int64_t>(1, 16384 / D), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / (H * T), h = (i / T) % H, t = i % T;
      const float* xr = xp + b * xb + h * xh + t * xt;
      const float* cr = cp + (b * T + t) * D;
      const float* sr = sp + (b * T + t) * D;
      float* orow = op + i * D;
      for (int64_t d = 0; d < half; ++d) {
        const float x1 = xr[d * xd], x2 = xr[(d + half) * xd];
        orow[d] = x1 * cr[d] - x2 * sr[d];
        orow[d + half] = x2 * cr[d + half] + x1 * sr[d + half];
      }
    }
  });
  return out;
}

}  // namespace leap::model
