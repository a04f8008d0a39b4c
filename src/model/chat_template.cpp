#include "model/chat_template.hpp"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "util/error.hpp"

namespace leap::model {

namespace fs = std::filesystem;

std::string read_chat_template(const fs::path& dir) {
  const fs::path cfg = dir / "tokenizer_config.json";
  if (fs::exists(cfg)) {
    std::ifstream in(cfg);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw ModelError(cfg.string() + ": not valid JSON (" + e.what() + ")");
    }
    if (auto it = j.find("chat_template"); it != j.end()) {
      if (it->is_string()) return it->get<std::string>();
      if (it->is_array())
        for (const auto& t : *it)
          if (t.is_object() && t.value("name", "") == "default" && t.contains("template") && t["template"].is_string())
            return t["template"].get<std::string>();
    }
  }
  const fs::path jinja = dir / "chat_template.jinja";
  if (fs::exists(jinja)) {
    std::ifstream in(jinja, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
  }
  return "";
}

namespace {

/// Every quoted string literal of `jinja` ('...' or "..."), unescaped as Jinja (Python) does for
/// the escapes these templates use. Text outside {{ }} / {% %} is template data, not literals, and
/// is scanned too: a quote there is rare and harmless (a literal that does not match is ignored).
std::vector<std::string> string_literals(std::string_view jinja) {
  std::vector<std::string> out;
  for (size_t i = 0; i < jinja.size(); ++i) {
    const char q = jinja[i];
    if (q != '\'' && q != '"') continue;
    std::string lit;
    size_t j = i + 1;
    for (; j < jinja.size() && jinja[j] != q; ++j) {
      if (jinja[j] == '\\' && j + 1 < jinja.size()) {
        const char e = jinja[++j];
        lit += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
      } else {
        lit += jinja[j];
      }
    }
    if (j >= jinja.size()) break;  // unterminated: nothing more to read
    out.push_back(std::move(lit));
    i = j;
  }
  return out;
}

}  // namespace

ChatTemplateInfo analyze_chat_template(std::string_view jinja, ChatFormat format) {
  ChatTemplateInfo info;
  if (jinja.empty()) return info;
  const bool chatml = jinja.find("<|im_start|>") != std::string_view::npos;
  const bool llama3 = jinja.find("<|start_header_id|>") != std::string_view::npos;
  if (format == ChatFormat::ChatML) {
    if (!chatml) info.differences.push_back("the template has no <|im_start|> marker: it is not ChatML, which leap renders");
    static constexpr std::string_view open = "<|im_start|>system\n", close = "<|im_end|>";
    for (const std::string& lit : string_literals(jinja)) {
      if (lit.rfind(open, 0) != 0) continue;
      const size_t end = lit.find(close, open.size());
      if (end == std::string::npos) continue;  // "<|im_start|>system\n" + a variable: not a default
      std::string body = lit.substr(open.size(), end - open.size());
      if (body.find("<|im_start|>") != std::string::npos) continue;
      info.default_system = std::move(body);
      break;
    }
  }
  // Qwen3: an assistant turn's "<think>...</think>" reasoning is cut from the history (turns before
  // the last user message); leap renders every turn's text whole.
  if (jinja.find("split('</think>')") != std::string_view::npos || jinja.find("split(\"</think>\")") != std::string_view::npos)
    info.differences.push_back("the template drops the <think>...</think> reasoning of earlier assistant turns and "
                               "writes a <think> block into an assistant turn after the last user message (Qwen3); "
                               "leap renders each assistant turn's text as it is, so a multi-turn prompt differs "
                               "when an answer holds reasoning");
  if (format == ChatFormat::Llama3) {
    if (!llama3)
      info.differences.push_back("the template has no <|start_header_id|> marker: it is not Llama-3's, which leap renders");
    if (jinja.find("Cutting Knowledge Date") != std::string_view::npos)
      info.differences.push_back("the template adds a system preamble (\"Cutting Knowledge Date: ... Today Date: ...\", "
                                 "Llama 3.1 and later) that leap does not render");
  }
  return info;
}

ChatTemplateInfo checkpoint_chat_template(const fs::path& dir, ChatFormat format) {
  ChatTemplateInfo info = analyze_chat_template(read_chat_template(dir), format);
  for (const auto& d : info.differences)
    spdlog::warn("{}: chat template: {}; prompts rendered by leap ({}) differ from the template's", dir.string(), d,
                 chat_format_name(format));
  if (!info.default_system.empty())
    spdlog::debug("{}: chat template's default system message: {}", dir.string(), info.default_system);
  return info;
}

}  // namespace leap::model
