#include "env/input_rewrite.hpp"

#include <algorithm>
#include <cstring>
#include <random>

#include "util/hash.hpp"

namespace leap::env {

std::vector<BlockCopy> input_rewrites(uint64_t seed, int run, const std::vector<RewriteTarget>& targets) {
  std::vector<BlockCopy> out;
  if (seed == 0) return out;
  for (const RewriteTarget& t : targets) {
    if (t.numel < 2 || t.elem_bytes == 0) continue;
    const size_t len = std::max<size_t>(1, std::min(t.numel / 512, t.numel / 2));
    const size_t span = t.numel - len + 1;  // possible block starts
    std::mt19937_64 gen(util::mix_seed(util::mix_seed(seed, static_cast<uint64_t>(run)), static_cast<uint64_t>(t.input)));
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

}  // namespace leap::env
