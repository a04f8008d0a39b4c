// What leap reads from a checkpoint's chat template (model/chat_template.hpp): the default system
// message (literal newlines as in SmolLM2's tokenizer_config.json, or Jinja's \n escapes), a
// Llama-3.1 preamble reported as a difference, and render_chat adding the default only when the
// conversation does not start with a system message. The rendering is checked against
// transformers' apply_chat_template on a real checkpoint in model_real_test.cpp.
#include <doctest/doctest.h>

#include "model/chat_template.hpp"

using namespace leap::model;

TEST_CASE("model: chat template default system message, preamble report, and rendering with it") {
  // SmolLM2-135M-Instruct's template (Apache-2.0), as its tokenizer_config.json holds it.
  const std::string smol =
      "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' "
      "+ message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\n' }}{% endif %}";
  auto info = analyze_chat_template(smol, ChatFormat::ChatML);
  CHECK(info.default_system == "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  CHECK(info.differences.empty());
  // The same with Jinja escapes (\n inside the literal) and a system line built from a variable.
  const std::string escaped =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
      "{%- else %}{{- '<|im_start|>system\\nYou are \\'Q\\', a helpful assistant.<|im_end|>\\n' }}{%- endif %}";
  CHECK(analyze_chat_template(escaped, ChatFormat::ChatML).default_system == "You are 'Q', a helpful assistant.");
  // No default: leap's own tiny template, and an empty one.
  CHECK(analyze_chat_template("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' }}{%- endfor %}",
                              ChatFormat::ChatML).default_system.empty());
  CHECK(analyze_chat_template("", ChatFormat::ChatML).differences.empty());
  // Llama 3.1's knowledge-date preamble is not rendered by leap: reported.
  auto llama = analyze_chat_template("{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Cutting Knowledge Date: "
                                     "December 2023\\n' }}", ChatFormat::Llama3);
  REQUIRE(llama.differences.size() == 1);
  CHECK(llama.differences[0].find("Cutting Knowledge Date") != std::string::npos);
  CHECK(analyze_chat_template(smol, ChatFormat::Llama3).differences.size() == 1);  // not Llama-3 markers

  const std::string sys = info.default_system;
  CHECK(render_chat(ChatFormat::ChatML, {{"user", "hi"}}, true, sys) ==
        "<|im_start|>system\n" + sys + "<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  CHECK(render_chat(ChatFormat::ChatML, {{"system", "S"}, {"user", "hi"}}, false, sys) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  CHECK(render_chat(ChatFormat::ChatML, {}, true, sys) == "<|im_start|>assistant\n");
}
