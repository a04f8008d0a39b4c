#pragma once
// Hugging Face config.json / generation_config.json for the supported decoder families.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace leap::model {

/// Architecture family of a checkpoint (config.json "model_type").
enum class ModelType { Qwen2, Qwen3, Llama };

/// The "model_type" spellings leap supports: {"qwen2", "qwen3", "llama"}.
const std::vector<std::string>& supported_model_types();

/// RoPE frequency scaling. type "default" means plain RoPE (no scaling).
struct RopeScaling {
  std::string type = "default";  ///< "default", "llama3", or as written (e.g. "linear", "yarn"); the transformer modules reject what they do not implement.
  double factor = 1.0;           ///< Scaling factor (llama3: 8 for Llama-3.1).
  double low_freq_factor = 1.0;  ///< llama3 only.
  double high_freq_factor = 4.0; ///< llama3 only.
  int64_t original_max_position_embeddings = 0;  ///< llama3 only, in tokens.
};

/// The model hyper-parameters leap needs, read from config.json (transformers 4.x layout with
/// top-level rope_theta/rope_scaling and 5.x layout with rope_parameters are both accepted).
struct ModelConfig {
  ModelType model_type = ModelType::Qwen2;
  std::string model_type_name;      ///< As spelled in the file.
  int64_t hidden_size = 0;          ///< Residual width.
  int64_t num_hidden_layers = 0;    ///< Decoder blocks.
  int64_t num_attention_heads = 0;  ///< Query heads.
  int64_t num_key_value_heads = 0;  ///< KV heads (GQA); defaults to num_attention_heads.
  int64_t head_dim = 0;             ///< Per-head width; defaults to hidden_size / num_attention_heads.
  int64_t intermediate_size = 0;    ///< MLP hidden width.
  int64_t vocab_size = 0;           ///< Rows of the embedding / lm_head.
  int64_t max_position_embeddings = 0;  ///< Context length the model was trained for, in tokens.
  double rms_norm_eps = 1e-6;       ///< RMSNorm epsilon.
  double rope_theta = 10000.0;      ///< RoPE base.
  RopeScaling rope_scaling;         ///< type "default" when none.
  bool tie_word_embeddings = false; ///< lm_head shares embed_tokens' weight.
  bool qkv_bias = false;            ///< q/k/v projections have a bias (qwen2: always; others: attention_bias).
  bool o_proj_bias = false;         ///< o_proj has a bias (llama/qwen3: attention_bias; qwen2: never).
  bool mlp_bias = false;            ///< gate/up/down have a bias (llama mlp_bias).
  bool qk_norm = false;             ///< Per-head RMSNorm on q and k (qwen3).
  std::string hidden_act = "silu"; ///< MLP activation.
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  ///< "eos_token_id" (an int or a list); may be empty.
  std::optional<int64_t> pad_token_id;
  std::string torch_dtype;          ///< "torch_dtype" or "dtype" ("bfloat16", ...); empty if absent.
  bool use_sliding_window = false;  ///< qwen2/qwen3 only.
  std::optional<int64_t> sliding_window;  ///< Window in tokens when set.
};

/// Parses config.json text. `source` names the file in messages.
/// Throws leap::ModelError naming `source` when the JSON is invalid, model_type is missing or
/// unsupported (the message lists the supported types), a required key (hidden_size,
/// num_hidden_layers, num_attention_heads, intermediate_size, vocab_size) is missing, a key has
/// the wrong type, a llama3 rope scaling lacks one of its keys, or sizes are inconsistent.
ModelConfig parse_model_config(std::string_view json_text, const std::string& source);

/// Reads `path`/config.json (or `path` itself if it is a file). Throws leap::ModelError naming
/// the file when it is missing or unreadable, plus everything parse_model_config throws.
ModelConfig load_model_config(const std::filesystem::path& path);

/// Defaults from generation_config.json that leap uses.
struct GenerationConfig {
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;  ///< Stop ids (an int or a list in the file).
  std::optional<int64_t> pad_token_id;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
};

/// Parses generation_config.json text. Throws leap::ModelError naming `source` on invalid JSON
/// or a key of the wrong type.
GenerationConfig parse_generation_config(std::string_view json_text, const std::string& source);

/// Reads `dir`/generation_config.json; a missing file gives an empty GenerationConfig (it is
/// optional in HF checkpoints). Throws like parse_generation_config.
GenerationConfig load_generation_config(const std::filesystem::path& dir);

/// Default stop ids: generation_config's eos ids, then config's eos ids not already listed.
std::vector<int64_t> default_stop_ids(const ModelConfig& config, const GenerationConfig& gen);

}  // namespace leap::model
