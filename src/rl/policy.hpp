#pragma once
// The policy as the rollout engine sees it: chat messages in, sampled completions out. The
// trainer's LocalPolicy wraps the LibTorch transformer; tests drive the engine with a scripted
// policy through the same interface.
#include <cstdint>
#include <string>
#include <vector>

#include "model/chat_format.hpp"

namespace leap::rl {

/// A prompt: chat messages, rendered by the policy with its chat format plus the generation
/// prompt (so the completion is the assistant's reply).
using Prompt = std::vector<model::ChatMessage>;

/// How to sample one batch.
struct SampleOptions {
  double temperature = 1.0;  ///< 0 = greedy
  double top_p = 1.0;
  int64_t top_k = 0;
  int64_t max_new_tokens = 512;  ///< tokens
  uint64_t seed = 0;             ///< same seed + same prompts = same completions
};

/// One sampled completion.
struct Sample {
  std::string text;                    ///< decoded completion, special tokens removed
  std::vector<int64_t> prompt_ids;     ///< the rendered prompt's token ids
  std::vector<int64_t> completion_ids; ///< generated token ids (including the stop token)
  /// Per completion token, its log-prob (nats) under the distribution it was drawn from before
  /// top-k / top-p: log_softmax(logits / temperature), temperature 0 read as 1 (the update's
  /// log-probs of the same tokens). Empty when the policy does not report them.
  std::vector<float> logprobs;
  bool truncated = false;              ///< stopped by max_new_tokens
};

/// Anything that writes completions for prompts.
class Policy {
 public:
  virtual ~Policy() = default;
  /// One completion per prompt, in order; all prompts are sampled as one batch where the
  /// implementation can. Throws leap::Error on failure.
  virtual std::vector<Sample> generate(const std::vector<Prompt>& prompts, const SampleOptions& options) = 0;
  /// Token count of `prompt` rendered with the generation prompt (tokens).
  virtual int64_t count_tokens(const Prompt& prompt) = 0;
  /// The prompt as the text the model reads (chat template applied). The default joins
  /// "role:\ncontent" blocks, for policies without a template.
  virtual std::string render(const Prompt& prompt);
};

}  // namespace leap::rl
