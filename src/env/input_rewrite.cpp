#include "env/input_rewrite.hpp"

#include <algorithm>
#include <cstring>

#include "util/hash.hpp"

namespace leap::env {

namespace {

/// SplitMix64 from a 64-bit state: the rewrite positions of one (seed, run, input). Seeding
/// std::mt19937_64 (312 words) for each run and input was 3% of a CPU-time check job's CPU.
struct SplitMix64 {
  uint64_t state;
  uint64_t operator()() noexcept {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

}  // namespace

std::vector<BlockCopy> input_rewrites(uint64_t seed, int run, const std::vector<RewriteTarget>& targets) {
  std::vector<BlockCopy> out;
  if (seed == 0) return out;
  for (const RewriteTarget& t : targets) {
    if (t.numel < 2 || t.elem_bytes == 0) continue;
    const size_t len = std::max<size_t>(1, std::min(t.numel / 512, t.numel / 2));
    const size_t span = t.numel - len + 1;  // possible block starts
    SplitMix64 gen{util::mix_seed(util::mix_seed(seed, static_cast<uint64_t>(run)), static_cast<uint64_t>(t.input))};
    for (int b = 0; b < 4; ++b) {
      const size_t dst = gen() % span;
      size_t src = gen() % span;
      if (src < dst + len && dst < src + len) {  // overlapping: move the source past the block
        src = (dst + len) % t.numel;
        if (src + len > t.numel || (src < dst + len && dst < src + len)) continue;
      }
      out.push_back(BlockCopy{t.input, dst * t.elem_bytes, src * t.elem_bytes, len * t.elem_bytes});
    }
  }
  return out;
}

void apply_rewrites(const std::vector<BlockCopy>& copies, const std::vector<void*>& inputs) {
  for (const BlockCopy& c : copies) {
    char* base = static_cast<char*>(inputs.at(static_cast<size_t>(c.input)));
    std::memcpy(base + c.dst, base + c.src, c.bytes);
  }
}

namespace {

/// XORs the lowest `mask_bits` bits of each element whose exponent field (from bit `exp_shift`,
/// `exp_all` its all-ones value) is neither all zeros nor all ones with the high bits of a mixed
/// Weyl sequence (i * k1 + k0, odd k1, both from `key`); `Word` is the element's bit pattern.
/// Two multiplies an element and no branch, so the loop vectorises.
template <class Word, class Weyl>
void flip_low_bits(uint64_t key, Word* w, size_t n, int mask_bits, int exp_shift, Word exp_all) {
  const Weyl k0 = static_cast<Weyl>(key), k1 = static_cast<Weyl>(key >> 17) | 1u;
  const Weyl m = static_cast<Weyl>(0x9E3779B97F4A7C15ull) | 1u;
  const int bits = 8 * static_cast<int>(sizeof(Weyl));
  const int shift = bits - mask_bits;
  for (size_t i = 0; i < n; ++i) {
    Weyl r = static_cast<Weyl>(static_cast<Weyl>(i) * k1 + k0);
    r = static_cast<Weyl>((r ^ (r >> (bits / 2))) * m);  // the high bits of i * k1 alone are nearly linear in i
    const Word x = w[i];
    const Word e = static_cast<Word>((x >> exp_shift) & exp_all);
    const Word keep = static_cast<Word>(-static_cast<Word>(e != 0 && e != exp_all));  // all ones when finite normal
    w[i] = static_cast<Word>(x ^ (static_cast<Word>(r >> shift) & keep));
  }
}

/// The uniform draw in [0, 1) for element `i` under `key` (53 bits).
inline double unit_draw(uint64_t key, size_t i) {
  SplitMix64 g{key ^ (static_cast<uint64_t>(i) * 0xD1B54A32D192ED03ull)};
  return static_cast<double>(g() >> 11) * 0x1.0p-53;
}

uint16_t bf16_bits(float f) {  // round to nearest even (finite inputs)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Fresh values low + (high - low) * u in [low, high) for a uniform input; an element whose
/// rounded value falls outside keeps its old value.
void fresh_uniform(uint64_t key, DType dtype, void* data, size_t numel, const UniformBounds& b) {
  const double low = b.low, span = b.high - b.low;
  if (!(span > 0)) return;
  auto inside = [&](double v) { return v >= b.low && v < b.high; };
  for (size_t i = 0; i < numel; ++i) {
    const double v = low + span * unit_draw(key, i);
    switch (dtype) {
      case DType::float64: {
        if (inside(v)) static_cast<double*>(data)[i] = v;
        break;
      }
      case DType::float32: {
        const float f = static_cast<float>(v);
        if (inside(f)) static_cast<float*>(data)[i] = f;
        break;
      }
      case DType::float16: {
        const _Float16 h = static_cast<_Float16>(static_cast<float>(v));
        if (inside(static_cast<double>(static_cast<float>(h)))) std::memcpy(static_cast<uint16_t*>(data) + i, &h, 2);
        break;
      }
      case DType::bfloat16: {
        const uint16_t h = bf16_bits(static_cast<float>(v));
        if (inside(bf16_value(h))) static_cast<uint16_t*>(data)[i] = h;
        break;
      }
      default:
        return;
    }
  }
}

}  // namespace

void perturb_input(uint64_t seed, int run, int position, DType dtype, void* data, size_t numel,
                   const UniformBounds* bounds) {
  if (seed == 0 || !data) return;
  const uint64_t base = util::mix_seed(util::mix_seed(seed ^ 0x5045525455524245ull, static_cast<uint64_t>(run)),
                                       static_cast<uint64_t>(position));
  if (bounds) {
    fresh_uniform(base, dtype, data, numel, *bounds);
    return;
  }
  switch (dtype) {  // every mantissa bit
    case DType::float32:
      flip_low_bits<uint32_t, uint32_t>(base, static_cast<uint32_t*>(data), numel, 23, 23, 0xFFu);
      break;
    case DType::float64:
      flip_low_bits<uint64_t, uint64_t>(base, static_cast<uint64_t*>(data), numel, 52, 52, 0x7FFu);
      break;
    case DType::float16:
      flip_low_bits<uint16_t, uint32_t>(base, static_cast<uint16_t*>(data), numel, 10, 10, 0x1Fu);
      break;
    case DType::bfloat16:
      flip_low_bits<uint16_t, uint32_t>(base, static_cast<uint16_t*>(data), numel, 7, 7, 0xFFu);
      break;
    default:
      break;
  }
}

}  // namespace leap::env
