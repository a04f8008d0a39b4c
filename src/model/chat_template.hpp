#pragma once
// What leap takes from a checkpoint's own chat template (the Jinja text in tokenizer_config.json or
// chat_template.jinja). leap does not interpret Jinja: it renders ChatML and Llama-3 itself
// (chat_format.hpp) and reads from the template what changes the rendered prompt for ordinary
// conversations: the default system message a template adds when the conversation has none
// (SmolLM2, Qwen2.5), and features leap does not render, which are reported, never ignored.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "model/chat_format.hpp"

namespace leap::model {

/// The chat template text of checkpoint folder `dir`: tokenizer_config.json's "chat_template" (a
/// string, or the entry named "default" of a list of {name, template}), else chat_template.jinja;
/// empty when the folder has neither. Throws leap::ModelError naming the file when
/// tokenizer_config.json is not valid JSON.
std::string read_chat_template(const std::filesystem::path& dir);

/// What analyze_chat_template found.
struct ChatTemplateInfo {
  /// The system message the template adds when the conversation starts with another role (empty:
  /// none). ChatML: a string literal "<|im_start|>system\n...<|im_end|>" in the template.
  std::string default_system;
  /// Template features leap's rendering does not reproduce, one sentence each (empty: none found).
  std::vector<std::string> differences;
};

/// Reads `jinja` (a chat template; empty: nothing to read) for `format` (ChatML or Llama3).
/// Jinja string literals are unescaped as Jinja does (\n, \t, \\, \', \"). Reported differences:
/// a Llama-3.1+ "Cutting Knowledge Date" system preamble; Qwen3's cutting of <think> reasoning
/// from earlier assistant turns; a template without the format's markers. Never throws.
/// Checked against transformers' rendering of the SmolLM2, Qwen2.5, Qwen3 and Llama-3 templates
/// (tests/chat_templates/, model_chat_template_test.cpp).
ChatTemplateInfo analyze_chat_template(std::string_view jinja, ChatFormat format);

/// analyze_chat_template of checkpoint folder `dir`'s template, with one warning logged per
/// difference (naming the folder), so that a prompt leap renders differently is never silent.
/// Throws what read_chat_template throws.
ChatTemplateInfo checkpoint_chat_template(const std::filesystem::path& dir, ChatFormat format);

}  // namespace leap::model
