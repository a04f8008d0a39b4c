#include "model/tokenizer.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "model/byte_level.hpp"
#include "model/utf8.hpp"
#include "util/error.hpp"

namespace leap::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string& source, const std::string& msg) {
  throw ModelError(source + ": " + msg);
}

bool get_flag(const json& j, const char* key, bool def) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : def;
}

bool empty_or_null_string(const json& j, const char* key) {
  return !j.contains(key) || j[key].is_null() || (j[key].is_string() && j[key].get<std::string>().empty());
}

void check_decoder(const json& d, const std::string& source) {
  if (d.is_null()) fail(source, "no decoder (leap needs a ByteLevel decoder)");
  const std::string type = d.value("type", "");
  if (type == "ByteLevel") return;
  if (type == "Sequence" && d.contains("decoders") && d["decoders"].is_array() && !d["decoders"].empty()) {
    for (const auto& x : d["decoders"]) check_decoder(x, source);
    return;
  }
  fail(source, "unsupported decoder type \"" + type + "\" (supported: ByteLevel)");
}

// TemplateProcessing "single": special tokens before / after the sequence "A".
void read_post_processor(const json& p, const std::string& source,
                         const std::unordered_map<std::string, TokenId>& added,
                         std::vector<TokenId>& prefix, std::vector<TokenId>& suffix) {
  if (p.is_null() || !p.is_object()) return;
  const std::string type = p.value("type", "");
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (const auto& x : p["processors"]) read_post_processor(x, source, added, prefix, suffix);
    return;
  }
  if (type != "TemplateProcessing" || !p.contains("single") || !p["single"].is_array()) return;
  bool after = false;
  for (const auto& piece : p["single"]) {
    if (piece.contains("Sequence")) {
      after = true;
    } else if (piece.contains("SpecialToken")) {
      const std::string name = piece["SpecialToken"].value("id", "");
      std::vector<TokenId> ids;
      if (p.contains("special_tokens") && p["special_tokens"].contains(name) &&
          p["special_tokens"][name].contains("ids")) {
        for (const auto& i : p["special_tokens"][name]["ids"]) ids.push_back(i.get<TokenId>());
      } else if (auto it = added.find(name); it != added.end()) {
        ids.push_back(it->second);
      } else {
        fail(source, "post_processor uses unknown special token \"" + name + "\"");
      }
      auto& dst = after ? suffix : prefix;
      dst.insert(dst.end(), ids.begin(), ids.end());
    }
  }
}

/// The BPE model of tokenizer.json's "model" object `m` (byte-level BPE only; fails naming
/// `source` for any other kind or option).
std::unique_ptr<BpeModel> read_bpe_model(const json& m, const std::string& source) {
  const std::string mtype = m.value("type", m.contains("merges") ? "BPE" : "");
  if (mtype != "BPE") fail(source, "unsupported model type \"" + mtype + "\" (supported: BPE)");
  if (!m.contains("vocab") || !m["vocab"].is_object()) fail(source, "model has no \"vocab\" object");
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0)
    fail(source, "BPE dropout is not supported");
  if (!empty_or_null_string(m, "continuing_subword_prefix") || !empty_or_null_string(m, "end_of_word_suffix"))
    fail(source, "BPE continuing_subword_prefix / end_of_word_suffix are not supported (byte-level BPE only)");
  if (get_flag(m, "byte_fallback", false)) fail(source, "BPE byte_fallback is not supported (byte-level BPE only)");
  std::unordered_map<std::string, TokenId> vocab;
  vocab.reserve(m["vocab"].size());
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer()) fail(source, "vocab entry \"" + it.key() + "\" is not an integer id");
    vocab.emplace(it.key(), it.value().get<TokenId>());
  }
  std::vector<std::pair<std::string, std::string>> merges;
  if (m.contains("merges") && m["merges"].is_array()) {
    merges.reserve(m["merges"].size());
    for (const auto& mg : m["merges"]) {
      if (mg.is_string()) {
        const std::string s = mg.get<std::string>();
        auto sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          fail(source, "merge \"" + s + "\" is not \"left right\"");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
        merges.emplace_back(mg[0].get<std::string>(), mg[1].get<std::string>());
      } else {
        fail(source, "merge " + mg.dump() + " is neither \"a b\" nor [\"a\", \"b\"]");
      }
    }
  }
  TokenId unk = -1;
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = vocab.find(m["unk_token"].get<std::string>());
    if (it != vocab.end()) unk = it->second;
  }
  return std::make_unique<BpeModel>(std::move(vocab), merges, get_flag(m, "ignore_merges", false), unk, source);
}

/// tokenizer.json's "added_tokens" in file order (fails naming `source` for a malformed entry).
std::vector<AddedToken> read_added_tokens(const json& j, const std::string& source) {
  std::vector<AddedToken> added;
  if (!j.contains("added_tokens") || !j["added_tokens"].is_array()) return added;
  for (const auto& a : j["added_tokens"]) {
    AddedToken t;
    if (!a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
      fail(source, "added_tokens entry " + a.dump() + " needs an integer \"id\" and a string \"content\"");
    t.id = a["id"].get<TokenId>();
    t.content = a["content"].get<std::string>();
    t.special = get_flag(a, "special", false);
    t.normalized = get_flag(a, "normalized", !t.special);
    t.lstrip = get_flag(a, "lstrip", false);
    t.rstrip = get_flag(a, "rstrip", false);
    t.single_word = get_flag(a, "single_word", false);
    if (t.id < 0) fail(source, "added token \"" + t.content + "\" has a negative id");
    added.push_back(std::move(t));
  }
  return added;
}

}  // namespace

Tokenizer Tokenizer::from_file(const fs::path& path) {
  std::error_code ec;
  fs::path file = fs::is_directory(path, ec) ? path / "tokenizer.json" : path;
  if (!fs::exists(file))
    throw ModelError(file.string() + ": missing (leap needs the checkpoint's tokenizer.json)");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ModelError(file.string() + ": cannot read");
  std::ostringstream ss;
  ss << in.rdbuf();
  return from_json(ss.str(), file.string());
}

Tokenizer Tokenizer::from_json(std::string_view text, const std::string& source) {
  json j;
  try {
    j = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    fail(source, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    fail(source, "no \"model\" object (not a tokenizers tokenizer.json?)");
  auto st = std::make_shared<State>();

  // ---- model ----
  st->bpe = read_bpe_model(j["model"], source);

  // ---- pipeline ----
  st->normalizer = Normalizer::from_json(j.value("normalizer", json()), source);
  st->pre = PreTokenizer::from_json(j.value("pre_tokenizer", json()), source);
  check_decoder(j.value("decoder", json()), source);

  // ---- added tokens ----
  st->added = read_added_tokens(j, source);
  for (const auto& t : st->added) st->added_by_content[t.content] = t.id;
  std::vector<std::string> raw_text, norm_text;
  for (const auto& t : st->added) {
    raw_text.push_back(t.normalized ? "" : t.content);
    norm_text.push_back(t.normalized ? st->normalizer.apply(t.content) : "");
  }
  st->raw_matcher = AddedTokenMatcher(st->added, raw_text);
  st->norm_matcher = AddedTokenMatcher(st->added, norm_text);

  // ---- id tables ----
  TokenId end = st->bpe->id_end();
  for (const auto& t : st->added) end = std::max(end, t.id + 1);
  st->bytes.assign(static_cast<std::size_t>(end), std::string());
  st->special.assign(static_cast<std::size_t>(end), 0);
  st->known.assign(static_cast<std::size_t>(end), 0);
  for (TokenId id = 0; id < st->bpe->id_end(); ++id)
    if (const std::string* tok = st->bpe->id_to_token(id)) {
      st->bytes[id] = byte_level_decode_token(*tok);
      st->known[id] = 1;
    }
  for (const auto& t : st->added) {
    st->bytes[t.id] = byte_level_decode_token(t.content);
    st->known[t.id] = 1;
    st->special[t.id] = t.special ? 1 : 0;
  }
  read_post_processor(j.value("post_processor", json()), source, st->added_by_content, st->prefix, st->suffix);

  Tokenizer tk;
  tk.id_end_ = end;
  tk.s_ = std::move(st);
  return tk;
}

std::vector<TokenId> Tokenizer::encode(std::string_view text_in, const EncodeOptions& opts) const {
  const State& s = *s_;
  std::string repaired;
  if (!utf8_valid(text_in)) {
    repaired = utf8_lossy(text_in);
    text_in = repaired;
  }
  std::vector<TokenId> ids;
  if (opts.add_special_tokens) ids = s.prefix;
  for (const Segment& raw : s.raw_matcher.split(text_in, opts.split_special_tokens)) {
    if (raw.id >= 0) {
      ids.push_back(raw.id);
      continue;
    }
    const std::string norm = s.normalizer.apply(raw.text);
    for (const Segment& seg : s.norm_matcher.split(norm, opts.split_special_tokens)) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      for (const std::string& word : s.pre.split(seg.text)) s.bpe->encode_word(word, ids);
    }
  }
  if (opts.add_special_tokens) ids.insert(ids.end(), s.suffix.begin(), s.suffix.end());
  return ids;
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= id_end_) return kEmpty;
  return s_->bytes[id];
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (TokenId id : ids) {
    if (id < 0 || id >= id_end_ || !s_->known[id]) continue;
    if (skip_special_tokens && s_->special[id]) continue;
    bytes += s_->bytes[id];
  }
  return utf8_lossy(bytes);
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = s_->added_by_content.find(std::string(token)); it != s_->added_by_content.end())
    return it->second;
  TokenId id = s_->bpe->token_to_id(token);
  if (id >= 0) return id;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(TokenId id) const {
  for (const auto& t : s_->added)
    if (t.id == id) return t.content;
  if (const std::string* t = s_->bpe->id_to_token(id)) return *t;
  return std::nullopt;
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && id < id_end_ && s_->special[id] != 0;
}

void check_tokenizer_fits(const Tokenizer& tok, int64_t model_vocab, const fs::path& model_dir) {
  if (tok.vocab_size() <= model_vocab) return;
  const TokenId top = tok.vocab_size() - 1;
  const fs::path file = fs::is_directory(model_dir) ? model_dir / "tokenizer.json" : model_dir;
  throw ModelError(file.string() + ": token id " + std::to_string(top) + " (" + tok.id_to_token(top).value_or("?") +
                   ") is beyond the model's vocabulary: config.json has vocab_size " + std::to_string(model_vocab) +
                   " (ids 0-" + std::to_string(model_vocab - 1) + ")");
}

}  // namespace leap::model
