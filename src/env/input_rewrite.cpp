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

/// Flips the lowest `mask_bits` bits of each element whose exponent field (from bit `exp_shift`,
/// `exp_all` its all-ones value) is neither all zeros nor all ones, where the high bits of a Weyl
/// sequence (i * k1 + k0, odd k1, both from `key`) are set; `Word` is the element's bit pattern.
/// One multiply an element and no branch, so the loop vectorises (16k float32 elements in a few
/// microseconds). Nearly every element changes (a zero draw is one in 2^mask_bits).
template <class Word, class Weyl>
void flip_low_bits(uint64_t key, Word* w, size_t n, int mask_bits, int exp_shift, Word exp_all) {
  const Weyl k0 = static_cast<Weyl>(key), k1 = static_cast<Weyl>(key >> 17) | 1u;
  const int shift = 8 * static_cast<int>(sizeof(Weyl)) - mask_bits;
  for (size_t i = 0; i < n; ++i) {
    const Weyl r = static_cast<Weyl>(static_cast<Weyl>(i) * k1 + k0);
    const Word x = w[i];
    const Word e = static_cast<Word>((x >> exp_shift) & exp_all);
    const Word keep = static_cast<Word>(-static_cast<Word>(e != 0 && e != exp_all));  // all ones when finite normal
    w[i] = static_cast<Word>(x ^ (static_cast<Word>(r >> shift) & keep));
  }
}

}  // namespace

void perturb_input(uint64_t seed, int run, int position, DType dtype, void* data, size_t numel) {
  if (seed == 0 || !data) return;
  const uint64_t base = util::mix_seed(util::mix_seed(seed ^ 0x5045525455524245ull, static_cast<uint64_t>(run)),
                                       static_cast<uint64_t>(position));
  switch (dtype) {
    case DType::float32:
      flip_low_bits<uint32_t, uint32_t>(base, static_cast<uint32_t*>(data), numel, 15, 23, 0xFFu);
      break;
    case DType::float64:
      flip_low_bits<uint64_t, uint64_t>(base, static_cast<uint64_t*>(data), numel, 44, 52, 0x7FFu);
      break;
    case DType::float16:
      flip_low_bits<uint16_t, uint32_t>(base, static_cast<uint16_t*>(data), numel, 3, 10, 0x1Fu);
      break;
    case DType::bfloat16:
      flip_low_bits<uint16_t, uint32_t>(base, static_cast<uint16_t*>(data), numel, 2, 7, 0xFFu);
      break;
    default:
      break;
  }
}

}  // namespace leap::env
