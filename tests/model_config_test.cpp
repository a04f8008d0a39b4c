// config.json / generation_config.json parsing against transformers-generated files.
#include <doctest/doctest.h>

#include "model/hf_config.hpp"
#include "model_fixtures.hpp"
#include "util/error.hpp"

using namespace leap::model;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("model");

TEST_CASE("model: config.json from transformers for qwen2, qwen3, llama") {
  leap_test::TempDir dir;
  std::string log;
  REQUIRE_MESSAGE(leap_test::run_tool("make_config_fixture.py", leap_test::shell_quote(dir.path.string()),
                                      "transformers", &log) == 0,
                  log);
  for (const std::string name : {"qwen2", "qwen3", "llama"}) {
    INFO("model_type " << name);
    const auto e = leap_test::read_json(dir.path / name / "expected.json");
    const ModelConfig c = load_model_config(dir.path / name);
    CHECK(c.model_type_name == e["model_type"].get<std::string>());
    CHECK(c.hidden_size == e["hidden_size"].get<int64_t>());
    CHECK(c.num_hidden_layers == e["num_hidden_layers"].get<int64_t>());
    CHECK(c.num_attention_heads == e["num_attention_heads"].get<int64_t>());
    CHECK(c.num_key_value_heads == e["num_key_value_heads"].get<int64_t>());
    CHECK(c.head_dim == e["head_dim"].get<int64_t>());
    CHECK(c.intermediate_size == e["intermediate_size"].get<int64_t>());
    CHECK(c.vocab_size == e["vocab_size"].get<int64_t>());
    CHECK(c.max_position_embeddings == e["max_position_embeddings"].get<int64_t>());
    CHECK(c.rms_norm_eps == doctest::Approx(e["rms_norm_eps"].get<double>()));
    CHECK(c.rope_theta == e["rope_theta"].get<double>());
    CHECK(c.rope_scaling.type == e["rope_type"].get<std::string>());
    CHECK(c.rope_scaling.factor == e["rope_factor"].get<double>());
    CHECK(c.rope_scaling.low_freq_factor == e["low_freq_factor"].get<double>());
    CHECK(c.rope_scaling.high_freq_factor == e["high_freq_factor"].get<double>());
    CHECK(c.rope_scaling.original_max_position_embeddings == e["original_max_position_embeddings"].get<int64_t>());
    CHECK(c.tie_word_embeddings == e["tie_word_embeddings"].get<bool>());
    if (e["bos_token_id"].is_null()) CHECK_FALSE(c.bos_token_id.has_value());
    else CHECK(c.bos_token_id == e["bos_token_id"].get<int64_t>());
    CHECK(c.eos_token_ids == e["eos_token_ids"].get<std::vector<int64_t>>());
    CHECK(c.torch_dtype == "bfloat16");
    const GenerationConfig g = load_generation_config(dir.path / name);
    CHECK(g.eos_token_ids == e["generation_eos"].get<std::vector<int64_t>>());
    CHECK(g.temperature.has_value());
    const auto stops = default_stop_ids(c, g);
    CHECK(stops.front() == e["generation_eos"][0].get<int64_t>());
  }
  const ModelConfig q2 = load_model_config(dir.path / "qwen2");
  CHECK(q2.model_type == ModelType::Qwen2);
  CHECK(q2.qkv_bias);
  CHECK_FALSE(q2.o_proj_bias);
  CHECK_FALSE(q2.qk_norm);
  CHECK(default_stop_ids(q2, load_generation_config(dir.path / "qwen2")) == std::vector<int64_t>{151645, 151643});
  const ModelConfig q3 = load_model_config(dir.path / "qwen3");
  CHECK(q3.model_type == ModelType::Qwen3);
  CHECK(q3.qk_norm);
  CHECK_FALSE(q3.qkv_bias);
  CHECK(q3.head_dim == 32);  // explicit, != hidden/heads
  const ModelConfig ll = load_model_config(dir.path / "llama" / "config.json");
  CHECK(ll.model_type == ModelType::Llama);
  CHECK_FALSE(ll.qkv_bias);
  CHECK(ll.rope_scaling.type == "llama3");
}

TEST_CASE("model: config.json in the transformers 4.x layout (top-level rope_theta, rope_scaling)") {
  // As in Llama-3.1-8B-Instruct / Qwen2.5 checkpoints on the hub.
  const char* llama31 = R"({
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 131072, "model_type": "llama",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 128256})";
  ModelConfig c = parse_model_config(llama31, "llama31/config.json");
  CHECK(c.head_dim == 128);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_scaling.type == "llama3");
  CHECK(c.rope_scaling.original_max_position_embeddings == 8192);
  CHECK(c.eos_token_ids == std::vector<int64_t>{128001, 128008, 128009});
  CHECK(c.torch_dtype == "bfloat16");

  const char* qwen25 = R"({"model_type": "qwen2", "hidden_size": 896, "intermediate_size": 4864,
    "num_attention_heads": 14, "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "rope_scaling": null, "sliding_window": 32768, "use_sliding_window": false,
    "tie_word_embeddings": true, "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16"})";
  c = parse_model_config(qwen25, "qwen25/config.json");
  CHECK(c.head_dim == 64);
  CHECK(c.rope_scaling.type == "default");
  CHECK(c.qkv_bias);
  CHECK(c.sliding_window == 32768);
  CHECK(c.eos_token_ids == std::vector<int64_t>{151645});
}

TEST_CASE("model: config errors name the file and the key") {
  CHECK_THROWS_WITH_AS(parse_model_config(R"({"model_type": "mistral", "hidden_size": 8})", "ck/config.json"),
                       doctest::Contains("ck/config.json: unsupported model_type \"mistral\" (supported: qwen2, qwen3, llama)"),
                       leap::ModelError);
  CHECK_THROWS_WITH_AS(parse_model_config(R"({"hidden_size": 8})", "ck/config.json"),
                       doctest::Contains("missing required key \"model_type\""), leap::ModelError);
  CHECK_THROWS_WITH_AS(
      parse_model_config(R"({"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
                             "num_attention_heads": 4, "vocab_size": 10})",
                         "ck/config.json"),
      doctest::Contains("ck/config.json: missing required key \"intermediate_size\""), leap::ModelError);
  CHECK_THROWS_WITH_AS(
      parse_model_config(R"({"model_type": "llama", "hidden_size": "64", "num_hidden_layers": 2})", "ck/config.json"),
      doctest::Contains("key \"hidden_size\" must be an integer"), leap::ModelError);
  CHECK_THROWS_WITH_AS(
      parse_model_config(R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                             "intermediate_size": 8, "vocab_size": 10,
                             "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})",
                         "ck/config.json"),
      doctest::Contains("missing required key \"low_freq_factor\""), leap::ModelError);
  CHECK_THROWS_WITH_AS(parse_model_config("{", "ck/config.json"), doctest::Contains("ck/config.json: not valid JSON"),
                       leap::ModelError);
  leap_test::TempDir dir;
  CHECK_THROWS_WITH_AS(load_model_config(dir.path), doctest::Contains("config.json: missing"), leap::ModelError);
  CHECK(load_generation_config(dir.path).eos_token_ids.empty());  // optional file
  CHECK_THROWS_WITH_AS(parse_generation_config(R"({"eos_token_id": "x"})", "g.json"),
                       doctest::Contains("g.json: key \"eos_token_id\" must be an integer or a list"), leap::ModelError);
  // Values a forward cannot use (a red team: rope_theta -1 gave garbage and rms_norm_eps -1 empty
  // output, silently): refused naming the key.
  const std::string base = R"("model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                             "num_key_value_heads": 2, "intermediate_size": 8, "vocab_size": 100)";
  CHECK_NOTHROW(parse_model_config("{" + base + R"(, "eos_token_id": [98, 99], "bos_token_id": 0, "torch_dtype": "bfloat16"})",
                                   "ck/config.json"));
  const std::pair<const char*, const char*> bad[] = {
      {R"("rope_theta": -1)", "key \"rope_theta\" must be a positive number"},
      {R"("rms_norm_eps": -1)", "key \"rms_norm_eps\" must be a positive number"},
      {R"("rms_norm_eps": 0)", "key \"rms_norm_eps\" must be a positive number"},
      {R"("max_position_embeddings": 0)", "key \"max_position_embeddings\" must be positive"},
      {R"("eos_token_id": 99999)", "key \"eos_token_id\" is 99999, outside the vocabulary (vocab_size 100)"},
      {R"("eos_token_id": [1, 100])", "key \"eos_token_id\" is 100"},
      {R"("bos_token_id": -5)", "key \"bos_token_id\" is -5"},
      {R"("torch_dtype": "float8")", "key \"torch_dtype\" is \"float8\""},
  };
  for (const auto& [extra, want] : bad) {
    CAPTURE(extra);
    CHECK_THROWS_WITH_AS(parse_model_config("{" + base + ", " + extra + "}", "ck/config.json"),
                         doctest::Contains((std::string("ck/config.json: ") + want).c_str()), leap::ModelError);
  }
}

TEST_SUITE_END();
