#include "model/chat_format.hpp"

#include "util/error.hpp"

namespace leap::model {

ChatFormat parse_chat_format(std::string_view name) {
  if (name == "auto") return ChatFormat::Auto;
  if (name == "chatml") return ChatFormat::ChatML;
  if (name == "llama3") return ChatFormat::Llama3;
  throw ModelError("unknown chat format \"" + std::string(name) + "\" (supported: auto, chatml, llama3)");
}

std::string_view chat_format_name(ChatFormat f) noexcept {
  switch (f) {
    case ChatFormat::Auto: return "auto";
    case ChatFormat::ChatML: return "chatml";
    case ChatFormat::Llama3: return "llama3";
  }
  return "?";
}

namespace {
bool has_all(const Tokenizer& tok, std::initializer_list<std::string_view> names) {
  for (auto n : names)
    if (!tok.token_to_id(n)) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  // Python str.strip() on ASCII whitespace (what jinja's trim does for these templates' inputs).
  auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}
}  // namespace

ChatFormat resolve_chat_format(ChatFormat requested, std::string_view model_type, const Tokenizer& tok) {
  const bool llama3 = has_all(tok, {"<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}), chatml = has_all(tok, {"<|im_start|>", "<|im_end|>"});
  switch (requested) {
    case ChatFormat::ChatML:
      if (!chatml)
        throw ModelError("chat format chatml needs <|im_start|> and <|im_end|>, which the " +
                         std::string(model_type) + " tokenizer lacks");
      return requested;
    case ChatFormat::Llama3:
      if (!llama3)
        throw ModelError("chat format llama3 needs <|start_header_id|>, <|end_header_id|> and <|eot_id|>, which the " +
                         std::string(model_type) + " tokenizer lacks");
      return requested;
    case ChatFormat::Auto:
      break;
  }
  if (llama3 && (model_type == "llama" || !chatml)) return ChatFormat::Llama3;
  if (chatml) return ChatFormat::ChatML;
  if (llama3) return ChatFormat::Llama3;
  throw ModelError("cannot pick a chat format for this " + std::string(model_type) +
                   " checkpoint: its tokenizer has neither ChatML (<|im_start|>) nor Llama-3 "
                   "(<|start_header_id|>) tokens; set the format explicitly");
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& given,
                        bool add_generation_prompt, std::string_view default_system) {
  std::vector<ChatMessage> with_system;
  if (!default_system.empty() && !given.empty() && given.front().role != "system") {
    with_system.push_back({"system", std::string(default_system)});
    with_system.insert(with_system.end(), given.begin(), given.end());
  }
  const std::vector<ChatMessage>& messages = with_system.empty() ? given : with_system;
  std::string out;
  switch (format) {
    case ChatFormat::ChatML:
      for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      return out;
    case ChatFormat::Llama3:
      out = "<|begin_of_text|>";
      for (const auto& m : messages) {
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n";
        out += trim(m.content);
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFormat::Auto:
      break;
  }
  throw ModelError("render_chat: resolve the chat format first (got auto)");
}

std::vector<TokenId> chat_stop_ids(ChatFormat format, const Tokenizer& tok) {
  std::string_view main, extra;
  switch (format) {
    case ChatFormat::ChatML: main = "<|im_end|>"; extra = "<|endoftext|>"; break;
    case ChatFormat::Llama3: main = "<|eot_id|>"; extra = "<|end_of_text|>"; break;
    case ChatFormat::Auto: throw ModelError("chat_stop_ids: resolve the chat format first (got auto)");
  }
  auto id = tok.token_to_id(main);
  if (!id) throw ModelError("tokenizer has no " + std::string(main) + " token");
  std::vector<TokenId> out{*id};
  if (auto e = tok.token_to_id(extra)) out.push_back(*e);
  return out;
}

std::string escape_special_tokens(const Tokenizer& tok, std::string_view text, bool all_added) {
  static constexpr std::string_view kZeroWidthSpace = "\xE2\x80\x8B";
  std::vector<std::string_view> literals;
  bool first_byte[256] = {};  // a literal can start only at one of these bytes
  for (const AddedToken& t : tok.added_tokens())
    if ((t.special || all_added) && !t.content.empty()) {
      literals.push_back(t.content);
      first_byte[static_cast<unsigned char>(t.content[0])] = true;
    }
  std::string out;
  size_t done = 0;  // text[0, done) is in `out`
  for (size_t i = 0; i < text.size(); ++i) {
    if (!first_byte[static_cast<unsigned char>(text[i])]) continue;
    bool hit = false;
    for (std::string_view lit : literals)
      if (text.compare(i, lit.size(), lit) == 0) {
        hit = true;
        break;
      }
    if (!hit) continue;
    out.append(text.substr(done, i + 1 - done));
    out.append(kZeroWidthSpace);
    done = i + 1;
  }
  if (done == 0) return std::string(text);
  out.append(text.substr(done));
  return out;
}

}  // namespace leap::model
