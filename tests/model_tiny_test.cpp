// `leap model init --preset tiny`: the BPE trainer, the written folder checked with Python
// tokenizers + transformers, and the `leap model` commands on it.
#include <doctest/doctest.h>

#include <torch/torch.h>

#include <fstream>

#include "model/bpe_trainer.hpp"
#include "model/chat_format.hpp"
#include "model/generate.hpp"
#include "model/safetensors_torch.hpp"
#include "model/tiny_model.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "model_fixtures.hpp"
#include "support.hpp"
#include "leap_source_dir.h"  // LEAP_SOURCE_DIR

using namespace leap::model;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("model");

TEST_CASE("model: BPE trainer merges the most frequent pairs, deterministically") {
  BpeTrainOptions o;
  o.vocab_size = 256 + 3 + 4;
  const std::vector<std::string> texts = {"aaaa aaaa aaaa abab abab", "aaaa"};
  auto a = train_bpe(texts, o);
  auto b = train_bpe(texts, o);
  CHECK(a.merges == b.merges);
  REQUIRE(a.merges.size() == 4);
  CHECK(a.merges[0] == std::pair<std::string, std::string>{"a", "a"});
  CHECK(a.size() == o.vocab_size);
  auto tok = Tokenizer::from_json(a.tokenizer_json(), "trained");
  const auto ids = tok.encode("aaaa<|im_end|>");
  REQUIRE(ids.size() == 2);
  CHECK(tok.decode(ids) == "aaaa<|im_end|>");
  CHECK(tok.is_special(ids[1]));
}

TEST_CASE("model: leap model init writes a tiny HF folder that Python tokenizers and transformers load") {
  leap_test::TempDir tmp;
  const fs::path dir = tmp.path / "tiny";
  auto info = init_tiny_model(dir, fs::path(LEAP_SOURCE_DIR) / "tasks", "tiny", 3);
  CHECK(info.corpus_documents > 5);
  CHECK(info.vocab_size >= 512);
  CHECK(info.vocab_size <= 2048);
  auto tok = Tokenizer::from_file(dir);
  CHECK(tok.vocab_size() == info.vocab_size);
  CHECK(tok.token_to_id("<|im_start|>").has_value());
  const std::vector<std::string> strings = {
      "__global__ void add(const float* a, float* b, int n) {\n  int i = blockIdx.x;\n}\n",
      "Write a kernel that computes softmax over the rows of a matrix.",
      "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
      "Unicode: café 你好 👍, numbers 12345, tabs\tand\r\nCRLF   spaces  ",
      ""};
  {
    std::ofstream f(tmp.path / "strings.json");
    f << nlohmann::json(strings).dump();
  }
  std::string log;
  REQUIRE_MESSAGE(leap_test::run_tool("tiny_model_check.py",
                                      leap_test::shell_quote(dir.string()) + " " +
                                          leap_test::shell_quote((tmp.path / "strings.json").string()) + " " +
                                          leap_test::shell_quote((tmp.path / "py").string()),
                                      "torch, tokenizers, transformers, safetensors", &log) == 0,
                  log);
  const auto e = leap_test::read_json(tmp.path / "py" / "encodings.json");
  CHECK(e["vocab_size"].get<int64_t>() == info.vocab_size);
  for (size_t i = 0; i < strings.size(); ++i) {
    INFO("string " << i);
    const auto ids = tok.encode(strings[i]);
    CHECK(std::vector<int64_t>(ids.begin(), ids.end()) == e["ids"][i].get<std::vector<int64_t>>());
    CHECK(tok.decode(ids) == e["decoded"][i].get<std::string>());
  }
  auto model = load_transformer(dir);
  CHECK(model->num_parameters() == info.num_parameters);
  auto ck = SafetensorsCheckpoint::open(tmp.path / "py" / "logits.safetensors");
  torch::NoGradGuard ng;
  auto logits = model->forward_logits(to_torch(ck.at("input_ids")));
  const double d = (logits - to_torch(ck.at("logits"))).abs().max().item<double>();
  MESSAGE("tiny model max |logit diff| vs transformers = " << d);
  CHECK(d < 1e-4);
  // Stop strings: a piece of the free-running completion ends the rerun right there.
  const auto chat = render_chat(ChatFormat::ChatML, {{"user", "Write a kernel"}}, true);
  const auto pid = tok.encode(chat);
  const std::vector<int64_t> prompt(pid.begin(), pid.end());
  SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = 24;
  auto free = generate(model, {prompt}, p, &tok);
  REQUIRE(free[0].tokens.size() == 24);
  CHECK(free[0].text == tok.decode(std::vector<TokenId>(free[0].tokens.begin(), free[0].tokens.end())));
  const std::string prefix =
      tok.decode(std::vector<TokenId>(free[0].tokens.begin(), free[0].tokens.begin() + 10));
  REQUIRE(prefix.size() >= 2);
  p.stop_strings = {prefix.substr(prefix.size() - 2)};
  auto stopped = generate(model, {prompt, prompt}, p, &tok);
  for (auto& c : stopped) {
    CHECK(c.finish == FinishReason::StopString);
    CHECK(c.tokens.size() <= 10);
    CHECK(c.text.find(p.stop_strings[0]) != std::string::npos);
  }
}

TEST_CASE("model: leap model init / inspect / tokenize / generate commands") {
  leap::test::TempDir tmp;
  const std::string dir = (tmp.path / "tiny").string();
  auto r = leap::test::run_leap("model init --preset tiny --out " + dir);
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(r.out.find("wrote") != std::string::npos);
  r = leap::test::run_leap("model inspect " + dir);
  CHECK(r.rc == 0);
  CHECK(r.out.find("architecture: qwen2") != std::string::npos);
  CHECK(r.out.find("parameters: ") != std::string::npos);
  CHECK(r.out.find("memory estimate") != std::string::npos);
  r = leap::test::run_leap("model tokenize " + dir + " 'int i = blockIdx.x;'");
  CHECK(r.rc == 0);
  CHECK(r.out.find("tokens: ") != std::string::npos);
  r = leap::test::run_leap("model generate " + dir + " --prompt 'Write a kernel' --chat --max-new-tokens 8 --seed 1 --temperature 1");
  CHECK_MESSAGE(r.rc == 0, r.err);
  auto r2 = leap::test::run_leap("model generate " + dir + " --prompt 'Write a kernel' --chat --max-new-tokens 8 --seed 1 --temperature 1");
  CHECK(r.out == r2.out);
  CHECK(r.err.find("new tokens") != std::string::npos);
  r = leap::test::run_leap("model inspect " + (tmp.path / "nothing").string());
  CHECK(r.rc == 1);
}

TEST_SUITE_END();
