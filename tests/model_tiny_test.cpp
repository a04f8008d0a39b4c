// `leap model init --preset tiny`: the BPE trainer, the written folder checked with Python
// tokenizers + transformers, and the `leap model` commands on it.
#include <doctest/doctest.h>

#include <torch/torch.h>

#include <fstream>
#include <map>
#include <random>

#include "model/bpe_trainer.hpp"
#include "model/chat_format.hpp"
#include "model/generate.hpp"
#include "model/byte_level.hpp"
#include "model/regex.hpp"
#include "model/safetensors_torch.hpp"
#include "model/tiny_model.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "model_fixtures.hpp"
#include "rl/prompts.hpp"
#include "tasks/task_spec.hpp"
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

// The BPE trainer as first written: every pair re-counted from scratch after each merge. The
// oracle of the incremental trainer.
static std::vector<std::pair<std::string, std::string>> naive_bpe_merges(const std::vector<std::string>& texts,
                                                                          const std::string& pattern, int64_t merges) {
  leap::model::Regex re(pattern);
  std::map<std::string, int64_t> counts;
  for (const auto& t : texts)
    for (auto [b, e] : re.find_all(t)) ++counts[t.substr(b, e - b)];
  std::vector<std::string> vocab;
  for (int i = 0; i < 256; ++i) vocab.push_back(std::string(1, static_cast<char>(i)));
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> freq;
  for (const auto& [w, n] : counts) {
    std::vector<int32_t> syms;
    for (unsigned char c : w) syms.push_back(c);
    words.push_back(syms);
    freq.push_back(n);
  }
  std::vector<std::pair<std::string, std::string>> out;
  for (int64_t m = 0; m < merges; ++m) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (size_t w = 0; w < words.size(); ++w)
      for (size_t i = 0; i + 1 < words[w].size(); ++i) pairs[{words[w][i], words[w][i + 1]}] += freq[w];
    std::pair<int32_t, int32_t> best{-1, -1};
    int64_t best_n = 0;
    for (const auto& [p, n] : pairs)
      if (n > best_n) best = p, best_n = n;
    if (best_n < 2) break;
    const auto id = static_cast<int32_t>(vocab.size());
    out.emplace_back(vocab[best.first], vocab[best.second]);
    vocab.push_back(vocab[best.first] + vocab[best.second]);
    for (auto& syms : words) {
      std::vector<int32_t> next;
      for (size_t i = 0; i < syms.size(); ++i) {
        if (i + 1 < syms.size() && syms[i] == best.first && syms[i + 1] == best.second) next.push_back(id), ++i;
        else next.push_back(syms[i]);
      }
      syms = next;
    }
  }
  return out;
}

TEST_CASE("model: the incremental BPE trainer merges exactly what re-counting every pair merges") {
  std::mt19937 rng(5);
  const std::string alphabet = "aab  bc\n=x1";
  std::vector<std::string> texts;
  for (int d = 0; d < 40; ++d) {
    std::string t;
    const int len = 20 + static_cast<int>(rng() % 200);
    for (int i = 0; i < len; ++i) t += alphabet[rng() % alphabet.size()];
    texts.push_back(t);
  }
  texts.push_back("aaaaaaaaaaaaaaaa bbbbbbbb");  // overlapping pairs inside one word
  for (const std::string& pattern : {std::string(kQwen2SplitPattern), std::string(kLineSplitPattern)}) {
    INFO("pattern " << pattern);
    BpeTrainOptions o;
    o.split_pattern = pattern;
    o.vocab_size = 256 + 3 + 150;
    const auto got = train_bpe(texts, o);
    const auto want = naive_bpe_merges(texts, pattern, 150);
    // The trainer stores byte-level strings (GPT-2's byte-to-unicode map); the oracle raw bytes.
    REQUIRE(got.merges.size() == want.size());
    CHECK(want.size() > 20);
    const auto& b2u = byte_to_unicode();
    auto to_bl = [&](const std::string& raw) {
      std::string s;
      for (unsigned char c : raw) s += b2u[c];
      return s;
    };
    for (size_t i = 0; i < want.size(); ++i) {
      INFO("merge " << i);
      CHECK(got.merges[i].first == to_bl(want[i].first));
      CHECK(got.merges[i].second == to_bl(want[i].second));
    }
    CHECK(got.split_pattern == pattern);
  }
}

TEST_CASE("model: a lines tokenizer is trained on the train split's rendered prompts, Python tokenizers agree") {
  leap::test::TempDir tmp;
  const std::string set = (tmp.path / "set").string(), dir = (tmp.path / "tiny").string();
  auto r = leap::test::run_leap("tasks generate ewred --count 80 --seed 3 --eval-fraction 0.25 --spellings canonical --names numbered --out " + set);
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  r = leap::test::run_leap("model init --preset tiny --pretokenizer lines --vocab 2048 --corpus " + set + " --out " + dir);
  REQUIRE_MESSAGE(r.rc == 0, r.err);
  CHECK(r.out.find("lines BPE") != std::string::npos);
  auto tok = Tokenizer::from_file(dir);
  CHECK(tok.vocab_size() <= 2048);
  // A line of every turn-1 prompt (the system prompt) and a boilerplate line of every answer are
  // one id each; a program line is a few ids at most.
  const std::string sys = leap::rl::system_prompt("cpu");
  CHECK(tok.encode(sys).size() == 1);
  CHECK(tok.encode("        for (int64_t c = 0; c < cols; ++c) {\n").size() == 1);
  CHECK(tok.encode("        x1 = torch.tanh(x)\n").size() <= 3);
  // The corpus: per train task (60 of 80) its solution, system and task messages and a feedback
  // message; nothing of the 20 eval tasks.
  const auto ts = leap::tasks::load_task_set(set);
  REQUIRE(ts.eval.size() == 20);
  CHECK(r.out.find("trained on 240 rendered prompts and solutions") != std::string::npos);
  const auto eval_msg = leap::rl::task_message(*ts.find(ts.eval.front()), "cpu");
  const auto train_msg = leap::rl::task_message(*ts.find(ts.train.front()), "cpu");
  const std::vector<std::string> strings = {train_msg, eval_msg, sys,
                                            "Unicode: café 你好 👍\r\nCRLF\n\n\nno newline at the end", ""};
  {
    std::ofstream f(tmp.path / "strings.json");
    f << nlohmann::json(strings).dump();
  }
  std::string log;
  REQUIRE_MESSAGE(leap_test::run_tool("tiny_model_check.py",
                                      leap_test::shell_quote(dir) + " " +
                                          leap_test::shell_quote((tmp.path / "strings.json").string()) + " " +
                                          leap_test::shell_quote((tmp.path / "py").string()),
                                      "torch, tokenizers, transformers, safetensors", &log) == 0,
                  log);
  const auto e = leap_test::read_json(tmp.path / "py" / "encodings.json");
  for (size_t i = 0; i < strings.size(); ++i) {
    INFO("string " << i);
    const auto ids = tok.encode(strings[i]);
    CHECK(std::vector<int64_t>(ids.begin(), ids.end()) == e["ids"][i].get<std::vector<int64_t>>());
    CHECK(tok.decode(ids) == strings[i]);
  }
  r = leap::test::run_leap("model init --preset tiny --pretokenizer lines --vocab 100 --corpus " + set + " --out " + dir + "2");
  CHECK(r.rc == 2);
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
  {
    // Written again over itself: fine. Over another model's shards and index: refused, untouched
    // (a loader prefers the index, so the old weights would have been used; a red team).
    r = leap::test::run_leap("model init --preset tiny --seed 3 --out " + dir);
    CHECK_MESSAGE(r.rc == 0, r.err);
    const std::string sharded = (tmp.path / "sharded").string();
    std::filesystem::create_directories(sharded);
    std::ofstream(sharded + "/model.safetensors.index.json") << "{\"weight_map\": {}}";
    std::ofstream(sharded + "/model-00001-of-00002.safetensors") << "old";
    r = leap::test::run_leap("model init --preset tiny --out " + sharded);
    CHECK(r.rc != 0);
    const bool named = r.err.find(sharded + ": holds model-00001-of-00002.safetensors") != std::string::npos ||
                       r.err.find(sharded + ": holds model.safetensors.index.json") != std::string::npos;
    CHECK_MESSAGE(named, r.err);
    CHECK_FALSE(std::filesystem::exists(sharded + "/model.safetensors"));
    CHECK_FALSE(std::filesystem::exists(sharded + "/config.json"));
    // A training checkpoint's folder: refused, its weights untouched.
    const std::string ckpt = (tmp.path / "ckpt").string();
    std::filesystem::copy(dir, ckpt);
    std::ofstream(ckpt + "/trainer_state.json") << "{}";
    const std::string before = leap::test::read_file(ckpt + "/model.safetensors");
    r = leap::test::run_leap("model init --preset tiny --seed 9 --out " + ckpt);
    CHECK(r.rc != 0);
    CHECK(r.err.find("holds trainer_state.json (a training checkpoint") != std::string::npos);
    CHECK(leap::test::read_file(ckpt + "/model.safetensors") == before);
  }
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
  // Past the model's positions: a usage error naming them, not a minutes-long run past them.
  r = leap::test::run_leap("model generate " + dir + " --prompt 'Write a kernel' --max-new-tokens 1048576");
  CHECK(r.rc == 2);
  CHECK(r.err.find("max_position_embeddings") != std::string::npos);
  r = leap::test::run_leap("model inspect " + (tmp.path / "nothing").string());
  CHECK(r.rc == 2);  // a missing folder is a usage error, named
  CHECK(r.err.find("no checkpoint folder") != std::string::npos);
  {
    // A config.json whose sizes do not fit the weights: inspect says so, as loading would.
    const std::string bad = (tmp.path / "bad").string();
    std::filesystem::copy(dir, bad);
    std::string cfg = leap::test::read_file(bad + "/config.json");
    const auto at = cfg.find("\"intermediate_size\"");
    REQUIRE(at != std::string::npos);
    const auto digits = cfg.find_first_of("0123456789", at);
    cfg.insert(digits, "1");  // 1 before the number: a size no weight has
    std::ofstream(bad + "/config.json", std::ios::trunc) << cfg;
    r = leap::test::run_leap("model inspect " + bad);
    CHECK(r.rc == 1);
    CHECK_MESSAGE(r.err.find("the config needs") != std::string::npos, r.err);
    CHECK(r.err.find("mlp.") != std::string::npos);
  }
}

TEST_SUITE_END();
