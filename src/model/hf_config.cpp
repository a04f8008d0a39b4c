#include "model/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "util/error.hpp"

namespace leap::model {

namespace fs = std::filesystem;
using nlohmann::json;

const std::vector<std::string>& supported_model_types() {
  static const std::vector<std::string> k{"qwen2", "qwen3", "llama"};
  return k;
}

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& msg) {
  throw ModelError(source + ": " + msg);
}

json parse_json(std::string_view text, const std::string& source) {
  try {
    json j = json::parse(text.begin(), text.end());
    if (!j.is_object()) fail(source, "top level is not a JSON object");
    return j;
  } catch (const json::parse_error& e) {
    fail(source, std::string("not valid JSON: ") + e.what());
  }
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw ModelError(p.string() + ": cannot read (missing or unreadable)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Typed accessors: present-and-null counts as absent.
bool has(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

int64_t get_int(const json& j, const char* key, const std::string& src) {
  if (!has(j, key)) fail(src, std::string("missing required key \"") + key + "\"");
  if (!j[key].is_number_integer())
    fail(src, std::string("key \"") + key + "\" must be an integer, got " + j[key].dump());
  return j[key].get<int64_t>();
}
int64_t get_int(const json& j, const char* key, const std::string& src, int64_t def) {
  return has(j, key) ? get_int(j, key, src) : def;
}
std::optional<int64_t> opt_int(const json& j, const char* key, const std::string& src) {
  if (!has(j, key)) return std::nullopt;
  return get_int(j, key, src);
}
double get_num(const json& j, const char* key, const std::string& src) {
  if (!has(j, key)) fail(src, std::string("missing required key \"") + key + "\"");
  if (!j[key].is_number())
    fail(src, std::string("key \"") + key + "\" must be a number, got " + j[key].dump());
  return j[key].get<double>();
}
double get_num(const json& j, const char* key, const std::string& src, double def) {
  return has(j, key) ? get_num(j, key, src) : def;
}
std::optional<double> opt_num(const json& j, const char* key, const std::string& src) {
  if (!has(j, key)) return std::nullopt;
  return get_num(j, key, src);
}
bool get_bool(const json& j, const char* key, const std::string& src, bool def) {
  if (!has(j, key)) return def;
  if (!j[key].is_boolean())
    fail(src, std::string("key \"") + key + "\" must be true or false, got " + j[key].dump());
  return j[key].get<bool>();
}
std::string get_str(const json& j, const char* key, const std::string& src, const std::string& def) {
  if (!has(j, key)) return def;
  if (!j[key].is_string())
    fail(src, std::string("key \"") + key + "\" must be a string, got " + j[key].dump());
  return j[key].get<std::string>();
}
std::vector<int64_t> int_or_list(const json& j, const char* key, const std::string& src) {
  std::vector<int64_t> out;
  if (!has(j, key)) return out;
  const json& v = j[key];
  if (v.is_number_integer()) {
    out.push_back(v.get<int64_t>());
  } else if (v.is_array()) {
    for (const json& e : v) {
      if (!e.is_number_integer())
        fail(src, std::string("key \"") + key + "\" must be an integer or a list of integers, got " + v.dump());
      out.push_back(e.get<int64_t>());
    }
  } else {
    fail(src, std::string("key \"") + key + "\" must be an integer or a list of integers, got " + v.dump());
  }
  return out;
}

void read_rope(const json& j, ModelConfig& c, const std::string& src) {
  // transformers 5.x: "rope_parameters": {"rope_theta", "rope_type", ...};
  // transformers 4.x: top-level "rope_theta" and optional "rope_scaling": {"type"|"rope_type", ...}.
  const json* params = nullptr;
  std::string where;
  if (has(j, "rope_parameters")) {
    params = &j["rope_parameters"];
    where = "rope_parameters";
  } else if (has(j, "rope_scaling")) {
    params = &j["rope_scaling"];
    where = "rope_scaling";
  }
  c.rope_theta = get_num(j, "rope_theta", src, 10000.0);
  if (params == nullptr) return;
  if (!params->is_object()) fail(src, "key \"" + where + "\" must be an object, got " + params->dump());
  const std::string psrc = src + " (" + where + ")";
  if (has(*params, "rope_theta")) c.rope_theta = get_num(*params, "rope_theta", psrc);
  std::string type = get_str(*params, "rope_type", psrc, get_str(*params, "type", psrc, "default"));
  c.rope_scaling.type = type;
  if (type == "default") return;
  c.rope_scaling.factor = get_num(*params, "factor", psrc);
  if (type == "llama3") {
    c.rope_scaling.low_freq_factor = get_num(*params, "low_freq_factor", psrc);
    c.rope_scaling.high_freq_factor = get_num(*params, "high_freq_factor", psrc);
    c.rope_scaling.original_max_position_embeddings =
        get_int(*params, "original_max_position_embeddings", psrc);
  } else {
    c.rope_scaling.original_max_position_embeddings =
        get_int(*params, "original_max_position_embeddings", psrc, 0);
  }
}

/// Values a forward cannot use (a red team's rope_theta -1 gave garbage, rms_norm_eps -1 empty
/// output, both silently): refused naming the key.
void check_ranges(const ModelConfig& c, const std::string& src) {
  auto positive = [&](double v, const char* key) {
    if (!(v > 0) || !std::isfinite(v)) fail(src, std::string("key \"") + key + "\" must be a positive number, got " + std::to_string(v));
  };
  if (c.max_position_embeddings <= 0)
    fail(src, "key \"max_position_embeddings\" must be positive, got " + std::to_string(c.max_position_embeddings));
  positive(c.rms_norm_eps, "rms_norm_eps");
  positive(c.rope_theta, "rope_theta");
  auto token = [&](int64_t id, const char* key) {
    if (id < 0 || id >= c.vocab_size)
      fail(src, std::string("key \"") + key + "\" is " + std::to_string(id) + ", outside the vocabulary (vocab_size " +
                    std::to_string(c.vocab_size) + ")");
  };
  if (c.bos_token_id) token(*c.bos_token_id, "bos_token_id");
  for (int64_t id : c.eos_token_ids) token(id, "eos_token_id");
  static const char* const kDtypes[] = {"", "auto", "float32", "float16", "bfloat16", "float64", "float", "half"};
  if (std::find(std::begin(kDtypes), std::end(kDtypes), c.torch_dtype) == std::end(kDtypes))
    fail(src, "key \"torch_dtype\" is \"" + c.torch_dtype + "\" (supported: float32, float16, bfloat16)");
}

}  // namespace

ModelConfig parse_model_config(std::string_view text, const std::string& src) {
  json j = parse_json(text, src);
  ModelConfig c;
  std::string supported;
  for (const auto& s : supported_model_types()) supported += (supported.empty() ? "" : ", ") + s;
  if (!has(j, "model_type"))
    fail(src, "missing required key \"model_type\" (supported: " + supported + ")");
  c.model_type_name = get_str(j, "model_type", src, "");
  if (c.model_type_name == "qwen2") c.model_type = ModelType::Qwen2;
  else if (c.model_type_name == "qwen3") c.model_type = ModelType::Qwen3;
  else if (c.model_type_name == "llama") c.model_type = ModelType::Llama;
  else fail(src, "unsupported model_type \"" + c.model_type_name + "\" (supported: " + supported + ")");

  c.hidden_size = get_int(j, "hidden_size", src);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", src);
  c.num_attention_heads = get_int(j, "num_attention_heads", src);
  c.intermediate_size = get_int(j, "intermediate_size", src);
  c.vocab_size = get_int(j, "vocab_size", src);
  c.num_key_value_heads = get_int(j, "num_key_value_heads", src, c.num_attention_heads);
  if (c.hidden_size <= 0 || c.num_hidden_layers <= 0 || c.num_attention_heads <= 0 ||
      c.intermediate_size <= 0 || c.vocab_size <= 0 || c.num_key_value_heads <= 0)
    fail(src, "hidden_size, num_hidden_layers, num_attention_heads, num_key_value_heads, "
              "intermediate_size and vocab_size must all be positive");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail(src, "num_attention_heads (" + std::to_string(c.num_attention_heads) +
                  ") is not a multiple of num_key_value_heads (" +
                  std::to_string(c.num_key_value_heads) + ")");
  if (has(j, "head_dim")) {
    c.head_dim = get_int(j, "head_dim", src);
  } else {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail(src, "no head_dim and hidden_size is not a multiple of num_attention_heads");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) fail(src, "head_dim must be positive and even");
  const int64_t default_max_pos = c.model_type == ModelType::Llama ? 2048 : 32768;
  c.max_position_embeddings = get_int(j, "max_position_embeddings", src, default_max_pos);
  c.rms_norm_eps = get_num(j, "rms_norm_eps", src, 1e-6);
  read_rope(j, c, src);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", src, false);
  c.hidden_act = get_str(j, "hidden_act", src, "silu");
  switch (c.model_type) {
    case ModelType::Qwen2:
      c.qkv_bias = get_bool(j, "attention_bias", src, true);
      c.o_proj_bias = false;
      break;
    case ModelType::Qwen3:
      c.qkv_bias = c.o_proj_bias = get_bool(j, "attention_bias", src, false);
      c.qk_norm = true;
      break;
    case ModelType::Llama:
      c.qkv_bias = c.o_proj_bias = get_bool(j, "attention_bias", src, false);
      c.mlp_bias = get_bool(j, "mlp_bias", src, false);
      break;
  }
  c.bos_token_id = opt_int(j, "bos_token_id", src);
  c.eos_token_ids = int_or_list(j, "eos_token_id", src);
  c.pad_token_id = opt_int(j, "pad_token_id", src);
  c.torch_dtype = get_str(j, "torch_dtype", src, get_str(j, "dtype", src, ""));
  if (c.model_type != ModelType::Llama) {
    c.use_sliding_window = get_bool(j, "use_sliding_window", src, false);
    c.sliding_window = opt_int(j, "sliding_window", src);
  }
  check_ranges(c, src);
  return c;
}

ModelConfig load_model_config(const fs::path& path) {
  std::error_code ec;
  fs::path file = fs::is_directory(path, ec) ? path / "config.json" : path;
  if (!fs::exists(file)) throw ModelError(file.string() + ": missing (no config.json in the checkpoint)");
  return parse_model_config(read_file(file), file.string());
}

GenerationConfig parse_generation_config(std::string_view text, const std::string& src) {
  json j = parse_json(text, src);
  GenerationConfig g;
  g.bos_token_id = opt_int(j, "bos_token_id", src);
  g.eos_token_ids = int_or_list(j, "eos_token_id", src);
  g.pad_token_id = opt_int(j, "pad_token_id", src);
  g.temperature = opt_num(j, "temperature", src);
  g.top_p = opt_num(j, "top_p", src);
  g.top_k = opt_int(j, "top_k", src);
  return g;
}

GenerationConfig load_generation_config(const fs::path& dir) {
  fs::path file = dir / "generation_config.json";
  if (!fs::exists(file)) return {};
  return parse_generation_config(read_file(file), file.string());
}

std::vector<int64_t> default_stop_ids(const ModelConfig& config, const GenerationConfig& gen) {
  std::vector<int64_t> out = gen.eos_token_ids;
  for (int64_t id : config.eos_token_ids)
    if (std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
  return out;
}

}  // namespace leap::model
