#include "rl/local_policy.hpp"

#include <algorithm>

#include "model/generate.hpp"

namespace leap::rl {

LocalPolicy::LocalPolicy(model::Transformer& model, const model::Tokenizer& tok, model::ChatFormat format,
                         int64_t max_batch, std::string default_system)
    : model_(model),
      tok_(tok),
      format_(format),
      max_batch_(std::max<int64_t>(1, max_batch)),
      default_system_(std::move(default_system)) {
  for (auto id : model::chat_stop_ids(format_, tok_)) stop_ids_.push_back(id);
}

namespace {

/// `prompt` with special-token literals in every message's content broken (model::
/// escape_special_tokens): message contents are data (the task, an earlier answer, the
/// environment's feedback), and only the chat template's own markers are turn markers. In text
/// that is not the policy's own (system, user: the task and the environment's feedback) every
/// added token's literal is broken; an earlier answer keeps the non-special added tokens it wrote
/// ("</think>"), as the policy generated them.
Prompt escaped(const model::Tokenizer& tok, const Prompt& prompt) {
  Prompt out = prompt;
  for (auto& m : out) m.content = model::escape_special_tokens(tok, m.content, m.role != "assistant");
  return out;
}

}  // namespace

std::string LocalPolicy::render(const Prompt& prompt) { return model::render_chat(format_, escaped(tok_, prompt), true, default_system_); }

std::vector<int64_t> LocalPolicy::encode_prompt(const Prompt& prompt) const {
  const auto ids = tok_.encode(model::render_chat(format_, escaped(tok_, prompt), true, default_system_));
  return {ids.begin(), ids.end()};
}

std::vector<int64_t> LocalPolicy::encode_completion(const std::string& text) const {
  model::EncodeOptions opts;
  opts.split_special_tokens = false;  // a completion's text is data, not template
  const auto ids = tok_.encode(text, opts);
  std::vector<int64_t> out(ids.begin(), ids.end());
  out.push_back(stop_ids_.front());
  return out;
}

void LocalPolicy::use_rollout_copy(c10::ScalarType dtype) {
  rollout_ = std::make_unique<model::RolloutWeights>(model_, dtype);
}

int64_t LocalPolicy::count_tokens(const Prompt& prompt) { return static_cast<int64_t>(encode_prompt(prompt).size()); }

std::vector<Sample> LocalPolicy::generate(const std::vector<Prompt>& prompts, const SampleOptions& options) {
  std::vector<Sample> out(prompts.size());
  std::vector<std::vector<int64_t>> ids(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) ids[i] = encode_prompt(prompts[i]);
  torch::NoGradGuard no_grad;
  if (rollout_) rollout_->refresh();  // the weights of the latest optimizer step
  model::Transformer& sampler = rollout_ ? rollout_->model() : model_;
  for (size_t start = 0; start < prompts.size(); start += static_cast<size_t>(max_batch_)) {
    const size_t end = std::min(prompts.size(), start + static_cast<size_t>(max_batch_));
    std::vector<std::vector<int64_t>> batch(ids.begin() + static_cast<long>(start), ids.begin() + static_cast<long>(end));
    model::SamplingParams p;
    p.temperature = options.temperature;
    p.top_p = options.top_p;
    p.top_k = options.top_k;
    p.max_new_tokens = options.max_new_tokens;
    p.stop_ids = stop_ids_;
    p.seed = options.seed + start;
    p.compute_dtype = rollout_ ? c10::ScalarType::Undefined : compute_dtype_;
    p.decode = decode_;
    auto completions = model::generate(sampler, batch, p, nullptr);
    for (size_t i = start; i < end; ++i) {
      auto& c = completions[i - start];
      Sample& s = out[i];
      s.prompt_ids = std::move(ids[i]);
      s.completion_ids = c.tokens;
      s.logprobs = c.logprobs;
      s.truncated = c.finish == model::FinishReason::Length;
      std::vector<model::TokenId> body;
      for (auto t : c.tokens)
        if (std::find(stop_ids_.begin(), stop_ids_.end(), t) == stop_ids_.end()) body.push_back(static_cast<model::TokenId>(t));
      s.text = tok_.decode(body, true);
    }
  }
  return out;
}

}  // namespace leap::rl
