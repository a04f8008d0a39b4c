#pragma once
// A small random Qwen2-style model for the model and RL tests: 3 layers, hidden 32, 4 query and
// 2 key/value heads (GQA), q/k/v bias, vocabulary 97, fp32 weights drawn from N(0, std^2).
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "model/hf_config.hpp"
#include "model/transformer.hpp"

namespace leap_test {

/// The model with weights seeded by `seed`; `tied`: tied embeddings; `max_positions`:
/// max_position_embeddings.
inline leap::model::Transformer small_qwen2(uint64_t seed, double std = 0.2, bool tied = false,
                                            int64_t max_positions = 512) {
  const std::string cfg = std::string(R"({"model_type": "qwen2", "hidden_size": 32, "num_hidden_layers": 3,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 97,
    "max_position_embeddings": )") + std::to_string(max_positions) +
                          R"(, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": )" +
                          (tied ? "true" : "false") + "}";
  leap::model::Transformer m(leap::model::parse_model_config(cfg, "test config"));
  torch::manual_seed(static_cast<int64_t>(seed));
  torch::NoGradGuard ng;
  for (auto& p : m->parameters()) p.normal_(0.0, std);
  return m;
}

}  // namespace leap_test
