// Tokenizer parity with HF `tokenizers` on fixtures made by tools/make_tokenizer_fixture.py.
#include <doctest/doctest.h>

#include <chrono>

#include "model/chat_format.hpp"
#include "model/stream_decoder.hpp"
#include "model/tokenizer.hpp"
#include "model_fixtures.hpp"
#include "util/error.hpp"

using namespace leap::model;
namespace fs = std::filesystem;

namespace {

// Fixtures are made once per test run.
const fs::path& tokenizer_fixtures() {
  static leap_test::TempDir dir;
  static bool made = false;
  if (!made) {
    std::string log;
    int rc = leap_test::run_tool("make_tokenizer_fixture.py", leap_test::shell_quote(dir.path.string()),
                                 "tokenizers", &log);
    REQUIRE_MESSAGE(rc == 0, "make_tokenizer_fixture.py failed:\n" << log);
    made = true;
  }
  return dir.path;
}

std::string escaped(const std::string& s) { return nlohmann::json(s).dump(); }

std::string ids_str(const std::vector<TokenId>& v) { return nlohmann::json(v).dump(); }

void check_variant(const std::string& variant) {
  const fs::path dir = tokenizer_fixtures() / variant;
  Tokenizer tok = Tokenizer::from_file(dir);
  const auto cases = leap_test::read_json(dir / "cases.json")["cases"];
  REQUIRE(cases.size() >= 200);
  int bad = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<TokenId>>();
    const auto got = tok.encode(text);
    if (got != want && ++bad <= 5)
      MESSAGE(variant << " encode " << escaped(text) << "\n  leap: " << ids_str(got) << "\n  hf:   " << ids_str(want));
    const std::string dec = tok.decode(want);
    if (dec != c["decoded"].get<std::string>() && ++bad <= 5)
      MESSAGE(variant << " decode " << escaped(text) << "\n  leap: " << escaped(dec) << "\n  hf:   " << c["decoded"].dump());
    const std::string dec_skip = tok.decode(want, /*skip_special_tokens=*/true);
    if (dec_skip != c["decoded_skip"].get<std::string>() && ++bad <= 5)
      MESSAGE(variant << " decode(skip) " << escaped(text) << "\n  leap: " << escaped(dec_skip));
    StreamDecoder sd(tok);
    std::string streamed;
    for (TokenId id : want) {
      std::string piece = sd.push(id);
      if (!leap::model::utf8_valid(piece) && ++bad <= 5) MESSAGE("stream gave invalid UTF-8 for " << escaped(text));
      streamed += piece;
    }
    streamed += sd.flush();
    if (streamed != dec && ++bad <= 5) MESSAGE(variant << " stream " << escaped(text) << " -> " << escaped(streamed));
    if (c.contains("ids_special")) {
      const auto ws = c["ids_special"].get<std::vector<TokenId>>();
      const auto gs = tok.encode(text, {.split_special_tokens = true, .add_special_tokens = true});
      if (gs != ws && ++bad <= 5) MESSAGE(variant << " encode(add_special) " << escaped(text) << ": " << ids_str(gs));
    }
  }
  CHECK_MESSAGE(bad == 0, variant << ": " << bad << " mismatches against HF tokenizers over " << cases.size()
                                  << " strings");
}

}  // namespace

TEST_SUITE_BEGIN("model");

TEST_CASE("model: tokenizer matches HF tokenizers (Qwen2 regex, NFC, specials)") { check_variant("qwen"); }

TEST_CASE("model: tokenizer matches HF tokenizers (Llama-3 regex, ignore_merges, string merges)") {
  check_variant("llama");
}

TEST_CASE("model: tokenizer matches HF tokenizers (GPT-2 ByteLevel with regex and prefix space)") {
  check_variant("gpt2");
}

TEST_CASE("model: tokenizer special-token handling") {
  Tokenizer tok = Tokenizer::from_file(tokenizer_fixtures() / "qwen");
  const TokenId im_start = *tok.token_to_id("<|im_start|>");
  const TokenId im_end = *tok.token_to_id("<|im_end|>");
  CHECK(tok.is_special(im_start));
  CHECK_FALSE(tok.is_special(*tok.token_to_id("<think>")));
  auto ids = tok.encode("a<|im_start|>b");
  CHECK(std::count(ids.begin(), ids.end(), im_start) == 1);
  // Untrusted text: specials are not recognised.
  auto plain = tok.encode("a<|im_start|>b", {.split_special_tokens = false});
  CHECK(std::count(plain.begin(), plain.end(), im_start) == 0);
  CHECK(tok.decode(plain) == "a<|im_start|>b");
  CHECK(tok.decode(std::vector<TokenId>{im_start, im_end}, true) == "");
  // Unknown ids (padded embedding rows) are skipped like HF.
  CHECK(tok.decode(std::vector<TokenId>{tok.vocab_size() + 5, -1}) == "");
}

TEST_CASE("model: stream decoder holds back an incomplete UTF-8 character") {
  Tokenizer tok = Tokenizer::from_file(tokenizer_fixtures() / "qwen");
  const std::string text = "ok 𝔘𝔫𝔦 done";  // not in the fixture corpus: byte tokens
  auto ids = tok.encode(text);
  StreamDecoder sd(tok);
  std::string out;
  bool held = false;
  for (TokenId id : ids) {
    std::string piece = sd.push(id);
    CHECK(utf8_valid(piece));
    if (sd.pending_bytes() > 0) held = true;
    out += piece;
  }
  out += sd.flush();
  CHECK(out == text);
  CHECK(held);
  // A dangling partial character becomes U+FFFD at flush.
  StreamDecoder sd2(tok);
  auto e = tok.encode("é");
  REQUIRE(e.size() >= 1);
  std::string first = tok.token_bytes(e[0]);
  if (first.size() == 1) {
    CHECK(sd2.push(e[0]).empty());
    CHECK(sd2.flush() == "\xEF\xBF\xBD");
  }
}

TEST_CASE("model: tokenizer is fast enough on long text") {
  Tokenizer tok = Tokenizer::from_file(tokenizer_fixtures() / "qwen");
  std::string text;
  for (int i = 0; i < 4000; ++i)
    text += "for (int k = " + std::to_string(i) + "; k < K; ++k) { acc += a[k] * b[k]; }  // 你好 👍\n";
  auto t0 = std::chrono::steady_clock::now();
  auto ids = tok.encode(text);
  auto secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(tok.decode(ids) == text);
  MESSAGE("encoded " << text.size() << " bytes into " << ids.size() << " tokens in " << secs << " s");
  CHECK(secs < 5.0);
  // One huge word (no regex split points) must not be quadratic.
  std::string word(200000, 'a');
  t0 = std::chrono::steady_clock::now();
  auto wids = tok.encode(word);
  secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(tok.decode(wids) == word);
  CHECK(secs < 5.0);
}

TEST_CASE("model: missing or bad tokenizer.json is a clear error") {
  leap_test::TempDir dir;
  CHECK_THROWS_WITH_AS(Tokenizer::from_file(dir.path), doctest::Contains("tokenizer.json: missing"),
                       leap::ModelError);
  {
    std::ofstream(dir.path / "tokenizer.json") << "{ not json";
  }
  CHECK_THROWS_WITH_AS(Tokenizer::from_file(dir.path), doctest::Contains("not valid JSON"), leap::ModelError);
  {
    std::ofstream(dir.path / "tokenizer.json")
        << R"({"model": {"type": "Unigram", "vocab": []}, "decoder": {"type": "ByteLevel"}})";
  }
  CHECK_THROWS_WITH_AS(Tokenizer::from_file(dir.path), doctest::Contains("unsupported model type \"Unigram\""),
                       leap::ModelError);
}

TEST_CASE("model: chat formats render and are picked from the checkpoint") {
  Tokenizer qwen = Tokenizer::from_file(tokenizer_fixtures() / "qwen");
  Tokenizer llama = Tokenizer::from_file(tokenizer_fixtures() / "llama");
  std::vector<ChatMessage> msgs{{"system", "Be brief."}, {"user", "  Hi!\n"}};
  CHECK(resolve_chat_format(ChatFormat::Auto, "qwen2", qwen) == ChatFormat::ChatML);
  CHECK(resolve_chat_format(ChatFormat::Auto, "llama", llama) == ChatFormat::Llama3);
  CHECK_THROWS_AS(resolve_chat_format(ChatFormat::Llama3, "qwen2", qwen), leap::ModelError);
  CHECK(parse_chat_format("chatml") == ChatFormat::ChatML);
  CHECK_THROWS_WITH_AS(parse_chat_format("vicuna"), doctest::Contains("auto, chatml, llama3"), leap::ModelError);
  CHECK(render_chat(ChatFormat::ChatML, msgs, true) ==
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n  Hi!\n<|im_end|>\n<|im_start|>assistant\n");
  CHECK(render_chat(ChatFormat::Llama3, msgs, true) ==
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto ids = qwen.encode(render_chat(ChatFormat::ChatML, msgs, true));
  CHECK(ids.front() == *qwen.token_to_id("<|im_start|>"));
  auto stops = chat_stop_ids(ChatFormat::Llama3, llama);
  CHECK(stops.front() == *llama.token_to_id("<|eot_id|>"));
  CHECK(chat_stop_ids(ChatFormat::ChatML, qwen).front() == *qwen.token_to_id("<|im_end|>"));
}

TEST_SUITE_END();
