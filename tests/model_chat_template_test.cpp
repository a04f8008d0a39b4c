// What leap reads from a checkpoint's chat template (model/chat_template.hpp): the default system
// message (literal newlines as in SmolLM2's tokenizer_config.json, or Jinja's \n escapes), a
// Llama-3.1 preamble reported as a difference, and render_chat adding the default only when the
// conversation does not start with a system message. The rendering is checked against
// transformers' renderer for four public templates here, and against apply_chat_template on a
// real checkpoint in model_real_test.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "model/chat_template.hpp"
#include "model_fixtures.hpp"

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

TEST_CASE("model: leap renders the SmolLM2, Qwen2.5, Qwen3 and Llama-3 templates as transformers does") {
  // The templates' texts (public, as their checkpoints ship them) are in tests/chat_templates/;
  // transformers' own renderer (the one apply_chat_template uses) gives the expected prompts.
  using Conversation = std::vector<ChatMessage>;
  const std::string task = "Write a CUDA kernel for y = relu(x).\n\n```python\nclass Model(nn.Module): ...\n```\n";
  const std::string answer = "```cuda\n__global__ void k(const float* x, float* y) { /* ... */ }\n```\n";
  const std::string feedback = "Result: compile_error\nline 3: error: expected ';'\n";
  const std::vector<std::pair<Conversation, bool>> cases = {
      {{{"user", task}}, true},
      {{{"system", "You write fast kernels."}, {"user", task}}, true},
      {{{"user", task}, {"assistant", answer}, {"user", feedback}}, true},  // a debugging turn
      {{{"system", "S"}, {"user", task}, {"assistant", answer}, {"user", feedback}}, true},
      {{{"user", "  padded  \n\n"}}, true},
      {{{"user", task}, {"assistant", answer}}, false},
  };
  // A Qwen3 answer that holds reasoning, in the history: the template cuts the reasoning.
  const Conversation thinking = {{"user", task}, {"assistant", "<think>\nplan\n</think>\n\n" + answer}, {"user", feedback}};
  struct Template {
    std::string file;
    ChatFormat format;
    std::string bos;
    bool cuts_reasoning;
  };
  const std::vector<Template> templates = {{"smollm2", ChatFormat::ChatML, "", false},
                                           {"qwen2.5", ChatFormat::ChatML, "", false},
                                           {"qwen3", ChatFormat::ChatML, "", true},
                                           {"llama3", ChatFormat::Llama3, "<|begin_of_text|>", false}};
  for (const Template& t : templates) {
    CAPTURE(t.file);
    const auto path = std::filesystem::path(LEAP_SOURCE_DIR) / "tests" / "chat_templates" / (t.file + ".jinja");
    std::ifstream in(path);
    REQUIRE(in.good());
    const std::string jinja((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    nlohmann::json spec = {{"bos_token", t.bos}, {"cases", nlohmann::json::array()}};
    auto add = [&](const Conversation& conv, bool gen) {
      nlohmann::json msgs = nlohmann::json::array();
      for (const auto& m : conv) msgs.push_back({{"role", m.role}, {"content", m.content}});
      spec["cases"].push_back({{"messages", msgs}, {"add_generation_prompt", gen}});
    };
    for (const auto& [conv, gen] : cases) add(conv, gen);
    add(thinking, true);
    leap_test::TempDir dir;
    std::ofstream(dir.path / "cases.json") << spec.dump();
    std::string log;
    const int rc = leap_test::run_tool("render_chat_template.py",
                                       leap_test::shell_quote(path.string()) + " " +
                                           leap_test::shell_quote((dir.path / "cases.json").string()) + " " +
                                           leap_test::shell_quote((dir.path / "out.json").string()),
                                       "transformers", &log);
    REQUIRE_MESSAGE(rc == 0, log);
    const auto expected = leap_test::read_json(dir.path / "out.json");
    REQUIRE(expected.size() == cases.size() + 1);
    const ChatTemplateInfo info = analyze_chat_template(jinja, t.format);
    for (size_t i = 0; i < cases.size(); ++i) {
      CAPTURE(i);
      const std::string leap = render_chat(t.format, cases[i].first, cases[i].second, info.default_system);
      // Qwen3 writes an empty <think> block into a final assistant turn (never in leap's prompts,
      // which end with a user message and the generation prompt): reported below.
      if (t.cuts_reasoning && cases[i].first.back().role == "assistant")
        CHECK(leap != expected[i].get<std::string>());
      else
        CHECK(leap == expected[i].get<std::string>());
    }
    // Where leap's rendering differs (Qwen3's reasoning cut), the difference is reported.
    const bool same = render_chat(t.format, thinking, true, info.default_system) == expected.back().get<std::string>();
    CHECK(same == !t.cuts_reasoning);
    CHECK(info.differences.size() == (t.cuts_reasoning ? 1u : 0u));
  }
}
