#include "model/decode_attention.hpp"

#include <ATen/Functions.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace leap::model {

namespace {

// Eight floats as one GCC vector: an AVX register in the avx2 clone below, two SSE registers in
// the default one.
using v8f = float __attribute__((vector_size(32)));

inline v8f load8(const float* p) {
  v8f r;
  std::memcpy(&r, p, sizeof r);
  return r;
}

inline void store8(float* p, v8f x) { std::memcpy(p, &x, sizeof x); }

// Strides (in elements) of the inputs, and the sizes.
struct Layout {
  int64_t B, H, Hkv, S, D;
  int64_t qb, qh;         // q[b, h, 0, :]
  int64_t kb, kh, ks;     // k[b, g, s, :]
  int64_t vb, vh, vs;     // v[b, g, s, :]
  int64_t mb, ms;         // mask[b, 0, 0, s]
  float scale;
};

using v8i = int32_t __attribute__((vector_size(32)));

// Lane i of the result: the sum of the eight lanes of x_i (a transpose-and-add tree).
inline v8f hsum8(v8f x0, v8f x1, v8f x2, v8f x3, v8f x4, v8f x5, v8f x6, v8f x7) {
  const v8i even = {0, 8, 2, 10, 4, 12, 6, 14}, odd = {1, 9, 3, 11, 5, 13, 7, 15};
  const v8i lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = {2, 3, 10, 11, 6, 7, 14, 15};
  const v8i lo4 = {0, 1, 2, 3, 8, 9, 10, 11}, hi4 = {4, 5, 6, 7, 12, 13, 14, 15};
  // [x0 01, x1 01, x0 23, x1 23, x0 45, x1 45, x0 67, x1 67] and so on.
  const v8f y01 = __builtin_shuffle(x0, x1, even) + __builtin_shuffle(x0, x1, odd);
  const v8f y23 = __builtin_shuffle(x2, x3, even) + __builtin_shuffle(x2, x3, odd);
  const v8f y45 = __builtin_shuffle(x4, x5, even) + __builtin_shuffle(x4, x5, odd);
  const v8f y67 = __builtin_shuffle(x6, x7, even) + __builtin_shuffle(x6, x7, odd);
  // [x0 0-3, x1 0-3, x2 0-3, x3 0-3, x0 4-7, x1 4-7, x2 4-7, x3 4-7].
  const v8f z03 = __builtin_shuffle(y01, y23, lo2) + __builtin_shuffle(y01, y23, hi2);
  const v8f z47 = __builtin_shuffle(y45, y67, lo2) + __builtin_shuffle(y45, y67, hi2);
  return __builtin_shuffle(z03, z47, lo4) + __builtin_shuffle(z03, z47, hi4);
}

inline float hsum(v8f x) {
  float s = 0;
  for (int i = 0; i < 8; ++i) s += x[i];
  return s;
}

// exp(x) per lane for x <= 0 (scores minus their maximum); lanes below -87 (masked keys at -inf
// among them) give 0. Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2, exp(r) by a degree-5
// polynomial (relative error about 1e-7), 2^n put into the exponent bits.
inline v8f exp8(v8f x) {
  const v8f lo = x > -87.0f ? x : v8f{} - 87.0f;  // the compare's lanes are -1 / 0
  v8f fx = lo * 1.44269504088896341f + 0.5f;
  v8f n = __builtin_convertvector(__builtin_convertvector(fx, v8i), v8f);
  n += __builtin_convertvector(n > fx, v8f);  // truncation -> floor (true lanes are -1)
  v8f r = lo - n * 0.693359375f + n * 2.12194440e-4f;
  v8f p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const v8i bits = (__builtin_convertvector(n, v8i) + 127) << 23;
  v8f scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const v8f out = p * scale;
  return x > -87.0f ? out : v8f{};
}

// One (row b, key/value head g) pair: every query head of the group against keys 0..S-1.
// `scores` holds S + 8 floats. Scores eight keys at a time (eight accumulators, summed by one
// transpose tree), the softmax eight lanes at a time, the weighted sum of values 32 columns at a
// time (four accumulators). Compiled twice (AVX2 and baseline x86-64), the clone picked at load
// time.
__attribute__((target_clones("avx2", "default"))) void attend_pair(const float* q, const float* k, const float* v,
                                                                   const bool* mask, float* out, const Layout& L,
                                                                   int64_t b, int64_t g, float* scores) {
  const int64_t group = L.H / L.Hkv, D = L.D, S = L.S;
  const float* kp = k + b * L.kb + g * L.kh;
  const float* vp = v + b * L.vb + g * L.vh;
  const bool* mp = mask ? mask + b * L.mb : nullptr;
  const float ninf = -std::numeric_limits<float>::infinity();
  const int64_t S8 = (S + 7) / 8 * 8;
  for (int64_t j = 0; j < group; ++j) {
    const int64_t h = g * group + j;
    const float* qp = q + b * L.qb + h * L.qh;
    // Scores q . k_s / sqrt(D).
    int64_t s = 0;
    for (; s + 8 <= S; s += 8) {
      const float* k0 = kp + s * L.ks;
      const int64_t ks = L.ks;
      // Eight named accumulators (an array would live in memory at -O2).
      v8f a0 = {}, a1 = {}, a2 = {}, a3 = {}, a4 = {}, a5 = {}, a6 = {}, a7 = {};
      for (int64_t d = 0; d < D; d += 8) {
        const v8f x = load8(qp + d);
        const float* kd = k0 + d;
        a0 += x * load8(kd);
        a1 += x * load8(kd + ks);
        a2 += x * load8(kd + 2 * ks);
        a3 += x * load8(kd + 3 * ks);
        a4 += x * load8(kd + 4 * ks);
        a5 += x * load8(kd + 5 * ks);
        a6 += x * load8(kd + 6 * ks);
        a7 += x * load8(kd + 7 * ks);
      }
      store8(scores + s, hsum8(a0, a1, a2, a3, a4, a5, a6, a7) * L.scale);
    }
    for (; s < S; ++s) {
      const float* kr = kp + s * L.ks;
      v8f a = {};
      for (int64_t d = 0; d < D; d += 8) a += load8(qp + d) * load8(kr + d);
      scores[s] = hsum(a) * L.scale;
    }
    for (; s < S8; ++s) scores[s] = ninf;  // padding lanes of the last block
    // Masked keys out, then the softmax's weights (0 for a masked key).
    if (mp)
      for (s = 0; s < S; ++s)
        if (!mp[s * L.ms]) scores[s] = ninf;
    float mx = ninf;
    for (s = 0; s < S; ++s) mx = std::max(mx, scores[s]);
    float* op = out + (b * L.H + h) * D;
    if (mx == ninf) {  // every key masked
      std::fill(op, op + D, 0.0f);
      continue;
    }
    v8f sum8 = {};
    for (s = 0; s < S8; s += 8) {
      const v8f p = exp8(load8(scores + s) - mx);
      store8(scores + s, p);
      sum8 += p;
    }
    const float inv = 1.0f / hsum(sum8);
    // out = sum_s p_s v_s / sum, 32 columns (four vectors) at a time when D allows.
    int64_t d = 0;
    for (; d + 32 <= D; d += 32) {
      // Two values per iteration into two sets of four accumulators.
      v8f a0 = {}, a1 = {}, a2 = {}, a3 = {}, b0 = {}, b1 = {}, b2 = {}, b3 = {};
      const float* vr = vp + d;
      const int64_t vs = L.vs;
      for (s = 0; s + 2 <= S; s += 2, vr += 2 * vs) {
        const float p = scores[s], p1 = scores[s + 1];
        a0 += p * load8(vr);
        a1 += p * load8(vr + 8);
        a2 += p * load8(vr + 16);
        a3 += p * load8(vr + 24);
        b0 += p1 * load8(vr + vs);
        b1 += p1 * load8(vr + vs + 8);
        b2 += p1 * load8(vr + vs + 16);
        b3 += p1 * load8(vr + vs + 24);
      }
      if (s < S) {
        const float p = scores[s];
        a0 += p * load8(vr);
        a1 += p * load8(vr + 8);
        a2 += p * load8(vr + 16);
        a3 += p * load8(vr + 24);
      }
      store8(op + d, (a0 + b0) * inv);
      store8(op + d + 8, (a1 + b1) * inv);
      store8(op + d + 16, (a2 + b2) * inv);
      store8(op + d + 24, (a3 + b3) * inv);
    }
    for (; d < D; d += 8) {
      v8f a0 = {};
      const float* vr = vp + d;
      for (s = 0; s < S; ++s, vr += L.vs) a0 += scores[s] * load8(vr);
      store8(op + d, a0 * inv);
    }
  }
}

}  // namespace

bool decode_attention_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& mask) {
  if (!q.defined() || !k.defined() || !v.defined()) return false;
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) return false;
  for (const auto* t : {&q, &k, &v})
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat) return false;
  const int64_t B = q.size(0), H = q.size(1), D = q.size(3), Hkv = k.size(1), S = k.size(2);
  if (q.size(2) != 1 || D % 8 != 0 || D == 0 || Hkv == 0 || H % Hkv != 0 || S == 0) return false;
  if (k.size(0) != B || v.size(0) != B || v.size(1) != Hkv || v.size(2) != S || k.size(3) != D || v.size(3) != D)
    return false;
  if (mask.defined()) {
    if (!mask.device().is_cpu() || mask.scalar_type() != at::kBool || mask.dim() != 4) return false;
    if ((mask.size(0) != B && mask.size(0) != 1) || mask.size(1) != 1 || mask.size(2) != 1 || mask.size(3) != S)
      return false;
  }
  return true;
}

at::Tensor decode_attention_cpu(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in,
                                const at::Tensor& mask_in) {
  TORCH_CHECK(decode_attention_supported(q_in, k_in, v_in, mask_in),
              "decode_attention_cpu: needs float32 CPU q [B, H, 1, D], k/v [B, Hkv, S, D] (D a multiple of 8), "
              "mask bool [B or 1, 1, 1, S]");
  // The kernel reads rows along the last dimension: make that contiguous where it is not.
  auto q = q_in.stride(3) == 1 ? q_in : q_in.contiguous();
  auto k = k_in.stride(3) == 1 ? k_in : k_in.contiguous();
  auto v = v_in.stride(3) == 1 ? v_in : v_in.contiguous();
  Layout L{};
  L.B = q.size(0);
  L.H = q.size(1);
  L.D = q.size(3);
  L.Hkv = k.size(1);
  L.S = k.size(2);
  L.qb = q.stride(0);
  L.qh = q.stride(1);
  L.kb = k.stride(0);
  L.kh = k.stride(1);
  L.ks = k.stride(2);
  L.vb = v.stride(0);
  L.vh = v.stride(1);
  L.vs = v.stride(2);
  L.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(L.D)));
  at::Tensor mask;
  const bool* mp = nullptr;
  if (mask_in.defined()) {
    mask = mask_in;
    L.mb = mask.size(0) == 1 ? 0 : mask.stride(0);
    L.ms = mask.stride(3);
    mp = mask.data_ptr<bool>();
  }
  auto out = at::empty({L.B, L.H, 1, L.D}, q.options());
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // About 32k multiply-adds per task before a second thread is worth its wake-up.
  const int64_t per_pair = (L.H / L.Hkv) * L.S * L.D * 2;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, per_pair));
  at::parallel_for(0, L.B * L.Hkv, grain, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(L.S + 8);
    for (int64_t i = begin; i < end; ++i) attend_pair(qp, kp, vp, mp, op, L, i / L.Hkv, i % L.Hkv, scores.data());
  });
  return out;
}

}  // namespace leap::model
