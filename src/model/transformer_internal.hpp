#pragma once
// Small helpers shared by the files of model/transformer.hpp's implementation (not a public API).
#include <string>

#include <torch/torch.h>

namespace leap::model::detail {

/// "[2, 3, 4]" for a shape, in error messages.
inline std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

/// Whether parameter name `n` is a LoRA adapter matrix (".lora_a" / ".lora_b").
inline bool is_lora_name(const std::string& n) {
  return n.size() >= 6 && (n.ends_with("lora_a") || n.ends_with("lora_b"));
}

}  // namespace leap::model::detail
