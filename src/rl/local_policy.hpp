#pragma once
// The Policy over leap's own LibTorch transformer: chat template, tokenizer, batched KV-cache
// sampling. The trainer updates the same Transformer between steps.
#include <cstdint>
#include <vector>

#include <memory>

#include "model/chat_format.hpp"
#include "model/generate.hpp"
#include "model/rollout_weights.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "rl/policy.hpp"

namespace leap::rl {

/// Samples from a Transformer (no autograd, batches of at most `max_batch` prompts).
class LocalPolicy : public Policy {
 public:
  /// `model` and `tok` must outlive the policy. The chat format must be resolved (not Auto).
  /// `default_system`: the checkpoint template's default system message (model::
  /// checkpoint_chat_template), rendered when a prompt does not start with a system message.
  LocalPolicy(model::Transformer& model, const model::Tokenizer& tok, model::ChatFormat format,
              int64_t max_batch = 64, std::string default_system = "");
  std::vector<Sample> generate(const std::vector<Prompt>& prompts, const SampleOptions& options) override;
  int64_t count_tokens(const Prompt& prompt) override;
  std::string render(const Prompt& prompt) override;
  /// Token ids of the rendered prompt (with the generation prompt).
  std::vector<int64_t> encode_prompt(const Prompt& prompt) const;
  /// Token ids of a completion text followed by the end-of-turn token (for supervised samples).
  std::vector<int64_t> encode_completion(const std::string& text) const;
  const std::vector<int64_t>& stop_ids() const { return stop_ids_; }
  /// Generates in `dtype` (autocast, KV cache of that dtype; model::SamplingParams::compute_dtype),
  /// e.g. kBFloat16 over fp32 master weights on a GPU, as the update's forward runs. Undefined
  /// (default): the weights' dtype.
  void set_compute_dtype(c10::ScalarType dtype) { compute_dtype_ = dtype; }
  /// Generates from a rollout copy of the model in `dtype` (model::RolloutWeights: LoRA merged,
  /// q/k/v and gate/up fused, no autocast), refreshed from the model at every generate() call,
  /// so it always holds the weights of the latest optimizer step. Costs one more copy of the
  /// weights in `dtype` on the model's device.
  void use_rollout_copy(c10::ScalarType dtype);
  /// Whether generate() samples from a rollout copy.
  bool has_rollout_copy() const { return rollout_ != nullptr; }
  /// How generation runs its decode steps (default Auto).
  void set_decode_mode(model::DecodeMode mode) { decode_ = mode; }

 private:
  model::Transformer& model_;
  const model::Tokenizer& tok_;
  model::ChatFormat format_;
  int64_t max_batch_;
  std::string default_system_;
  std::vector<int64_t> stop_ids_;
  c10::ScalarType compute_dtype_ = c10::ScalarType::Undefined;
  std::unique_ptr<model::RolloutWeights> rollout_;
  model::DecodeMode decode_ = model::DecodeMode::Auto;
};

}  // namespace leap::rl
