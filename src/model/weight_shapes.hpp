#pragma once
// The tensors a model config needs, by Hugging Face name and shape, and a checkpoint checked
// against them without building the model (torch-free: `leap model inspect` checks a 7B
// checkpoint without allocating it).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/hf_config.hpp"
#include "model/safetensors.hpp"

namespace leap::model {

/// Every parameter TransformerImpl(c) holds, under its Hugging Face name ("model.layers.0.
/// self_attn.q_proj.weight", "lm_head.weight" unless tie_word_embeddings), with its shape, e.g.
/// q_proj.weight [heads * head_dim, hidden_size]. Matches TransformerImpl::hf_state_dict()
/// (tests/model_transformer_test.cpp checks it for qwen2, qwen3 and llama).
std::map<std::string, std::vector<int64_t>> hf_weight_shapes(const ModelConfig& c);

/// Checks that `ckpt` holds exactly the tensors `c` needs with their shapes; a tied lm_head.weight
/// and rotary inv_freq buffers are allowed extras. Throws leap::ModelError naming the checkpoint
/// and the first unexpected tensor, missing tensor or shape that differs (with both shapes).
void check_weights(const SafetensorsCheckpoint& ckpt, const ModelConfig& c);

}  // namespace leap::model
