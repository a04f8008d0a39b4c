// Transformer forward, generation and training log-probs against `transformers`.
#include <doctest/doctest.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "model/generate.hpp"
#include "model/safetensors_torch.hpp"
#include "model/transformer.hpp"
#include "model/weight_shapes.hpp"
#include "model_fixtures.hpp"
#include "util/error.hpp"

using namespace leap::model;
namespace fs = std::filesystem;

TEST_SUITE_BEGIN("model");

namespace {

// One python run for every test case of this file.
const fs::path& fixture_dir() {
  static leap_test::TempDir dir;
  static bool made = false;
  if (!made) {
    std::string log;
    REQUIRE_MESSAGE(leap_test::run_tool("transformer_fixture.py", leap_test::shell_quote(dir.path.string()),
                                        "torch, transformers, safetensors", &log) == 0,
                    log);
    made = true;
  }
  return dir.path;
}

std::map<std::string, torch::Tensor> reference(const fs::path& d) {
  auto ck = SafetensorsCheckpoint::open(d / "reference.safetensors");
  std::map<std::string, torch::Tensor> out;
  for (auto& n : ck.names()) out[n] = to_torch(ck.at(n));
  return out;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

const char* kModels[] = {"qwen2", "qwen3", "llama"};

}  // namespace

TEST_CASE("model: transformer logits match transformers (qwen2, qwen3, llama3 rope), fp32") {
  const auto& root = fixture_dir();
  for (const std::string name : kModels) {
    INFO("model " << name);
    auto model = load_transformer(root / name);
    auto ref = reference(root / name);
    torch::NoGradGuard ng;
    auto logits = model->forward_logits(ref["input_ids"]);
    const double d = max_diff(logits, ref["logits"]);
    MESSAGE(name << " max |logit diff| (no padding) = " << d);
    CHECK(d < 1e-4);
    auto pad_mask = ref["pad_mask"].to(torch::kBool);
    auto pl = model->forward_logits(ref["pad_ids"], ref["pad_positions"], pad_mask);
    auto sel = pad_mask.unsqueeze(-1).expand_as(pl);
    const double dp = max_diff(pl.masked_select(sel), ref["pad_logits"].masked_select(sel));
    MESSAGE(name << " max |logit diff| (left padded) = " << dp);
    CHECK(dp < 1e-4);
    // The KV cache path gives the same logits as one full forward.
    KVCache cache = model->make_cache(3, 16);
    auto ids = ref["input_ids"];
    auto a = model->forward_logits(ids.narrow(1, 0, 6), {}, {}, &cache);
    auto b = model->forward_logits(ids.narrow(1, 6, 5), {}, {}, &cache);
    CHECK(max_diff(torch::cat({a, b}, 1), ref["logits"]) < 1e-4);
    // bf16 weights and activations (RMSNorm and rotary tables still in fp32): close to fp32.
    auto mb = load_transformer(root / name, torch::kBFloat16);
    CHECK((mb->dtype() == torch::kBFloat16));
    const double rel = max_diff(mb->forward_logits(ref["input_ids"]), ref["logits"]) /
                       ref["logits"].abs().max().item<double>();
    MESSAGE(name << " bf16 max |logit diff| / max |logit| = " << rel);
    CHECK(rel < 0.05);
  }
}

TEST_CASE("model: batched greedy generation matches transformers generate() token for token") {
  const auto& root = fixture_dir();
  for (const std::string name : kModels) {
    INFO("model " << name);
    auto model = load_transformer(root / name);
    const auto g = leap_test::read_json(root / name / "generate.json");
    const auto prompts = g["prompts"].get<std::vector<std::vector<int64_t>>>();
    const auto greedy = g["greedy"].get<std::vector<std::vector<int64_t>>>();
    const int64_t eos = g["eos"].get<int64_t>();
    SamplingParams p;
    p.temperature = 0;
    p.max_new_tokens = g["new_tokens"].get<int64_t>();
    p.stop_ids = {eos};
    auto out = generate(model, prompts, p);
    REQUIRE(out.size() == greedy.size());
    int stopped = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      INFO("prompt " << i);
      CHECK(out[i].tokens == greedy[i]);
      const bool hit = !greedy[i].empty() && greedy[i].back() == eos;
      stopped += hit;
      CHECK(out[i].finish == (hit ? FinishReason::StopToken : FinishReason::Length));
      CHECK(out[i].logprobs.size() == out[i].tokens.size());
    }
    MESSAGE(name << ": " << stopped << " of " << out.size() << " greedy rows stopped on EOS");
    // One at a time gives the same as batched.
    auto single = generate(model, {prompts[2]}, p);
    CHECK(single[0].tokens == greedy[2]);
    // Stop on another token too: row 0 stops at the first occurrence of its 3rd token.
    SamplingParams s = p;
    const int64_t stop = greedy[0][std::min<size_t>(2, greedy[0].size() - 1)];
    s.stop_ids = {eos, stop};
    auto st = generate(model, prompts, s);
    for (size_t i = 0; i < st.size(); ++i) {
      auto it = std::find(greedy[i].begin(), greedy[i].end(), stop);
      std::vector<int64_t> want(greedy[i].begin(), it == greedy[i].end() ? it : it + 1);
      CHECK(st[i].tokens == want);
      const bool hit = it != greedy[i].end() || greedy[i].back() == eos;
      CHECK(st[i].finish == (hit ? FinishReason::StopToken : FinishReason::Length));
    }
    s.stop_ids.clear();
    s.max_new_tokens = 7;
    for (auto& c : generate(model, prompts, s)) CHECK(c.tokens.size() == 7);
  }
}

TEST_CASE("model: sampling is reproducible with a seed, top_k=1 is greedy") {
  const auto& root = fixture_dir();
  auto model = load_transformer(root / "llama");
  const auto g = leap_test::read_json(root / "llama" / "generate.json");
  const auto prompts = g["prompts"].get<std::vector<std::vector<int64_t>>>();
  SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 0.95;
  p.max_new_tokens = 16;
  p.seed = 1234;
  auto a = generate(model, prompts, p);
  auto b = generate(model, prompts, p);
  p.seed = 99;
  auto c = generate(model, prompts, p);
  bool any_diff = false;
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].tokens == b[i].tokens);
    CHECK(a[i].logprobs == b[i].logprobs);
    any_diff = any_diff || a[i].tokens != c[i].tokens;
    for (float lp : a[i].logprobs) CHECK(lp <= 0.0f);
  }
  CHECK(any_diff);
  p.top_k = 1;
  p.top_p = 1.0;
  auto k1 = generate(model, prompts, p);
  const auto greedy = g["greedy"].get<std::vector<std::vector<int64_t>>>();
  for (size_t i = 0; i < k1.size(); ++i) {
    const size_t n = std::min<size_t>(16, greedy[i].size());
    CHECK(std::vector<int64_t>(k1[i].tokens.begin(), k1[i].tokens.begin() + n) ==
          std::vector<int64_t>(greedy[i].begin(), greedy[i].begin() + n));
  }
}

TEST_CASE("model: completion log-probs for training match log_softmax of the full logits, with gradients") {
  const auto& root = fixture_dir();
  for (const std::string name : {"qwen2", "qwen3"}) {
    INFO("model " << name);
    auto model = load_transformer(root / name);
    auto ref = reference(root / name);
    auto ids = ref["pad_ids"];
    auto mask = ref["pad_mask"];
    const int64_t C = 4, S = ids.size(1);
    auto full = model->forward_logits(ids, positions_from_mask(mask), mask.to(torch::kBool));
    auto want = torch::log_softmax(full, -1).narrow(1, S - C - 1, C).gather(-1, ids.narrow(1, S - C, C).unsqueeze(-1)).squeeze(-1);
    auto lsm = torch::log_softmax(full, -1).narrow(1, S - C - 1, C);
    auto want_ent = -(lsm.exp() * lsm).sum(-1);
    auto got = completion_logprobs(model, ids, mask, C, 1.0, /*chunk=*/3);
    CHECK(max_diff(got.logprobs, want) < 1e-5);
    CHECK(max_diff(got.entropy, want_ent) < 1e-4);
    // Gradients: same with and without chunk checkpointing / layer checkpointing.
    model->zero_grad();
    auto l1 = completion_logprobs(model, ids, mask, C, 0.7, 2);
    (l1.logprobs.sum() + 0.1 * l1.entropy.sum()).backward();
    std::vector<torch::Tensor> g1;
    for (auto& p : model->parameters()) {
      REQUIRE(p.grad().defined());
      g1.push_back(p.grad().clone());
    }
    CHECK(g1.front().abs().sum().item<double>() > 0);
    model->zero_grad();
    model->set_gradient_checkpointing(true);
    auto l2 = completion_logprobs(model, ids, mask, C, 0.7, 64);
    (l2.logprobs.sum() + 0.1 * l2.entropy.sum()).backward();
    size_t i = 0;
    double worst = 0;
    for (auto& p : model->parameters()) worst = std::max(worst, max_diff(p.grad(), g1[i++]));
    CHECK(worst < 1e-4);
  }
}

TEST_CASE("model: checkpointed layers are recomputed under the forward's autocast (bf16 on cpu)") {
  // Under bf16 autocast the gradients with layer checkpointing must be those of the bf16
  // forward, the same as without checkpointing; a recomputation in fp32 (autocast lost in
  // backward) differs at bf16's resolution.
  auto model = load_transformer(fixture_dir() / "qwen2");
  auto ref = reference(fixture_dir() / "qwen2");
  auto ids = ref["pad_ids"];
  auto mask = ref["pad_mask"];
  const int64_t C = 4;
  auto grads = [&](bool checkpointing) {
    model->zero_grad();
    model->set_gradient_checkpointing(checkpointing);
    {
      at::autocast::set_autocast_enabled(at::kCPU, true);
      at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
      auto lp = completion_logprobs(model, ids, mask, C, 1.0, 64);
      at::autocast::set_autocast_enabled(at::kCPU, false);
      at::autocast::clear_cache();
      lp.logprobs.sum().backward();  // backward outside the autocast region, as the trainer does
    }
    std::vector<torch::Tensor> g;
    for (auto& p : model->parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
    return g;
  };
  auto plain = grads(false);
  auto ckpt = grads(true);
  model->set_gradient_checkpointing(false);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    worst = std::max(worst, max_diff(ckpt[i], plain[i]));
    scale = std::max(scale, plain[i].abs().max().item<double>());
  }
  CAPTURE(worst);
  CAPTURE(scale);
  REQUIRE(scale > 0);
  CHECK(worst <= 1e-6 * scale);
  // And the check can fail: gradients of the same loss computed in fp32 differ beyond it.
  model->zero_grad();
  completion_logprobs(model, ids, mask, C, 1.0, 64).logprobs.sum().backward();
  double fp32_diff = 0;
  size_t j = 0;
  for (auto& p : model->parameters()) fp32_diff = std::max(fp32_diff, max_diff(p.grad(), plain[j++]));
  CHECK(fp32_diff > 1e-6 * scale);
}

TEST_CASE("model: generation in a bf16 compute dtype keeps a bf16 KV cache and the training forward's log-probs") {
  auto model = load_transformer(fixture_dir() / "qwen2");
  REQUIRE((model->dtype() == torch::kFloat32));
  CHECK((model->make_cache(1, 8, torch::kBFloat16).k[0].scalar_type() == torch::kBFloat16));
  CHECK((model->make_cache(1, 8).k[0].scalar_type() == torch::kFloat32));
  const std::vector<int64_t> prompt = {3, 17, 42, 7, 99, 12};
  SamplingParams p;
  p.temperature = 0;  // greedy
  p.max_new_tokens = 8;
  p.compute_dtype = torch::kBFloat16;
  torch::NoGradGuard no_grad;
  auto out = generate(model, {prompt}, p).at(0);
  REQUIRE(out.tokens.size() == 8);
  CHECK_FALSE(at::autocast::is_autocast_enabled(at::kCPU));  // restored afterwards
  // The same tokens scored by the training forward under the same bf16 autocast.
  std::vector<int64_t> all(prompt);
  all.insert(all.end(), out.tokens.begin(), out.tokens.end());
  auto ids = torch::tensor(all, torch::kInt64).unsqueeze(0);
  auto mask = torch::ones_like(ids);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  auto lp = completion_logprobs(model, ids, mask, 8, 1.0, 64).logprobs[0];
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  auto fp32 = completion_logprobs(model, ids, mask, 8, 1.0, 64).logprobs[0];
  double worst = 0, vs_fp32 = 0;
  for (int64_t i = 0; i < 8; ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(out.logprobs[static_cast<size_t>(i)]) - lp[i].item<double>()));
    vs_fp32 = std::max(vs_fp32, std::abs(static_cast<double>(out.logprobs[static_cast<size_t>(i)]) - fp32[i].item<double>()));
  }
  CAPTURE(worst);
  CAPTURE(vs_fp32);
  CHECK(worst < 0.05);  // bf16 rounding of the cache and of the kernels' shapes, not a different function
  CHECK(vs_fp32 > 0);   // and it did compute in bf16
}

TEST_CASE("model: LoRA adapters start as a no-op, train only themselves, save and load") {
  const auto& root = fixture_dir();
  auto model = load_transformer(root / "qwen3");
  auto ref = reference(root / "qwen3");
  LoraOptions lo;
  lo.rank = 4;
  model->add_lora(lo);
  {
    torch::NoGradGuard ng;
    CHECK(max_diff(model->forward_logits(ref["input_ids"]), ref["logits"]) < 1e-4);
  }
  auto lp = completion_logprobs(model, ref["input_ids"], {}, 3);
  lp.logprobs.sum().backward();
  CHECK_FALSE(model->embed_tokens->weight.grad().defined());
  auto sd = model->lora_state_dict();
  CHECK(sd.size() == 3 * 7 * 2);
  CHECK(sd.count("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight") == 1);
  CHECK(sd.at("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight").grad().abs().sum().item<double>() > 0);
  {
    torch::NoGradGuard ng;
    for (auto& [k, v] : sd) v.add_(0.01);
  }
  leap_test::TempDir tmp;
  model->save_lora(tmp.path / "adapter");
  auto other = load_transformer(root / "qwen3");
  other->add_lora(lo);
  other->load_lora(tmp.path / "adapter");
  torch::NoGradGuard ng;
  CHECK(max_diff(model->forward_logits(ref["input_ids"]), other->forward_logits(ref["input_ids"])) < 1e-5);
  CHECK(max_diff(other->forward_logits(ref["input_ids"]), ref["logits"]) > 1e-3);
}

TEST_CASE("model: hf_weight_shapes lists what transformers saves and what the module holds (qwen2, qwen3, llama)") {
  const auto& root = fixture_dir();
  for (const char* name : kModels) {
    CAPTURE(name);
    const ModelConfig c = load_model_config(root / name);
    const auto want = hf_weight_shapes(c);
    // transformers' save_pretrained: the same names and shapes (a tied lm_head is not saved).
    auto ckpt = SafetensorsCheckpoint::open(root / name);
    std::map<std::string, std::vector<int64_t>> saved;
    for (const auto& n : ckpt.names()) saved[n] = ckpt.at(n).shape;
    CHECK(saved == want);
    // The module: hf_state_dict's names and sizes.
    Transformer m(c);
    std::map<std::string, std::vector<int64_t>> held;
    for (const auto& [n, p] : m->hf_state_dict()) held[n] = p.sizes().vec();
    CHECK(held == want);
    CHECK_NOTHROW(check_weights(ckpt, c));
  }
  // A shape the config does not give is named with both shapes, without building the model.
  ModelConfig c = load_model_config(root / "llama");
  c.intermediate_size += 1;
  CHECK_THROWS_WITH_AS(check_weights(SafetensorsCheckpoint::open(root / "llama"), c),
                       doctest::Contains(("down_proj.weight' has shape [" + std::to_string(c.hidden_size) + ", " +
                                         std::to_string(c.intermediate_size - 1) + "], the config needs [" +
                                         std::to_string(c.hidden_size) + ", " + std::to_string(c.intermediate_size) + "]")
                                            .c_str()),
                       leap::ModelError);
}

TEST_CASE("model: checkpoint errors name the tensor, unsupported rope is refused") {
  const auto& root = fixture_dir();
  auto model = load_transformer(root / "llama");
  auto sd = model->hf_state_dict();
  leap_test::TempDir tmp;
  auto write = [&](std::map<std::string, torch::Tensor> m) {
    for (auto& [k, v] : m) v = v.detach().contiguous();
    write_safetensors(tmp.path / "model.safetensors", tensor_bytes(m));
  };
  fs::copy_file(root / "llama" / "config.json", tmp.path / "config.json");
  auto missing = sd;
  missing.erase("model.layers.1.mlp.up_proj.weight");
  write(missing);
  CHECK_THROWS_WITH_AS(load_transformer(tmp.path), doctest::Contains("model.layers.1.mlp.up_proj.weight"),
                       leap::ModelError);
  auto extra = sd;
  extra["model.layers.0.self_attn.q_proj.bias"] = torch::zeros({64});
  write(extra);
  CHECK_THROWS_WITH_AS(load_transformer(tmp.path), doctest::Contains("model.layers.0.self_attn.q_proj.bias"),
                       leap::ModelError);
  auto bad = sd;
  bad["model.norm.weight"] = torch::zeros({63});
  write(bad);
  CHECK_THROWS_WITH_AS(load_transformer(tmp.path), doctest::Contains("model.norm.weight"), leap::ModelError);
  ModelConfig c = model->config();
  c.rope_scaling.type = "yarn";
  CHECK_THROWS_WITH_AS(Transformer{c}, doctest::Contains("yarn"), leap::ModelError);
}

TEST_SUITE_END();

TEST_CASE("model: under bf16 autocast the rotary tables keep q and k in bf16 (no promotion to fp32)") {
  // fp32 weights with bf16 autocast (the trainer's mixed precision): the keys after the rotary
  // product are bf16, as the projections are; fp32 tables promoted them to fp32 before. The
  // logits stay within bf16 rounding of the fp32 forward.
  auto model = load_transformer(fixture_dir() / "qwen2");
  REQUIRE((model->dtype() == torch::kFloat32));
  torch::NoGradGuard no_grad;
  auto ids = torch::tensor({{3, 17, 42, 7, 99, 12, 5, 8}}, torch::kInt64);
  auto mask = torch::ones_like(ids);
  const auto fp32_keys = prefix_keys_values(model, ids, mask, ids.size(1));
  CHECK((fp32_keys.k.at(0).scalar_type() == torch::kFloat32));
  auto fp32 = model->forward_logits(ids, torch::Tensor(), mask).to(torch::kFloat32);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto keys = prefix_keys_values(model, ids, mask, ids.size(1));
  auto mixed = model->forward_logits(ids, torch::Tensor(), mask).to(torch::kFloat32);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  CHECK((keys.k.at(0).scalar_type() == torch::kBFloat16));
  CHECK((keys.v.at(0).scalar_type() == torch::kBFloat16));
  const double scale = fp32.abs().max().item<double>();
  const double diff = (mixed - fp32).abs().max().item<double>();
  CAPTURE(scale);
  CAPTURE(diff);
  CHECK(diff > 0);              // it did compute in bf16
  CHECK(diff < 0.05 * scale);  // bf16 rounding, not a different function
}
