#pragma once
// The policy update: old (and reference) log-probs by a no-grad forward, then PPO-style epochs
// (Schulman et al., arXiv:1707.06347, section 3 and Algorithm 1) of the clipped surrogate over mini-batches with gradient accumulation, grad-norm clipping and
// a skip on a non-finite loss or gradient (DESIGN.md section 4, "Loss"). Also the supervised
// (SFT) step. Samples are turns: their context plus their completion.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/transformer.hpp"
#include "rl/aggregation.hpp"
#include "rl/loss.hpp"

namespace torch::optim {
class Optimizer;
}
namespace leap::dist {
class ProcessGroup;
}

namespace leap::rl {

/// One training sample: a turn (or summary) with its advantage.
struct TrainSample {
  std::vector<int64_t> prompt_ids;      ///< rendered context (tokens)
  std::vector<int64_t> completion_ids;  ///< generated tokens
  double advantage = 0;
  int64_t segment_id = 0;               ///< unique per (group, rollout, segment) over all ranks, for segment_mean
  /// segment_mean: the sample's fixed share of the RL step's loss, 1 / (tokens of its segment *
  /// segments), both counted over the whole step and all ranks (set_segment_weights); < 0: unset.
  double weight = -1;
  /// The sampler's log-prob of each completion token (rl::Sample::logprobs); empty if unknown.
  /// With UpdateOptions::old_logprobs_from_rollout they are the sample's old log-probs.
  std::vector<float> rollout_logp;
  // Filled by the update:
  std::vector<float> old_logp;          ///< per completion token, before the update (nats)
  std::vector<float> ref_logp;          ///< per completion token under the frozen reference
  double old_logprob_mean = 0;          ///< mean of old_logp
  double new_logprob_mean = 0;          ///< mean per-token log-prob after the update
};

/// Settings of ppo_update.
struct UpdateOptions {
  LossOptions loss;
  Aggregation aggregation = Aggregation::token_mean;
  int64_t mini_batch_size = 8;   ///< samples per forward/backward
  int64_t grad_accum = 1;        ///< mini-batches per optimizer step
  int64_t ppo_epochs = 1;
  double max_grad_norm = 1.0;    ///< 0 = no clipping
  double temperature = 1.0;      ///< logits / T, as when sampling
  int64_t max_len = 512;         ///< L of constant_length (max_new_tokens)
  bool autocast_bf16 = false;    ///< bf16 autocast of the forward (CUDA only), fp32 master weights
  /// Positions per LM-head chunk of the log-prob forwards (each chunk's [B, chunk, vocab] logits
  /// recomputed in backward); 0: per device, logprob_chunk().
  int64_t logprob_chunk = 0;
  uint64_t seed = 0;             ///< shuffles the samples of each epoch
  int64_t pad_id = 0;            ///< token used for padding (masked out)
  /// Prompt sharing (issue 19): the samples of a mini-batch whose contexts start with the same
  /// tokens run that prefix once and their rests against its keys and values (plan_prompt_sharing),
  /// in every pass (old and reference log-probs, the training forward and backward); the
  /// log-probs and gradients equal the unshared ones up to float rounding. A sample whose context
  /// plus completion are the first tokens of another sample of the mini-batch (an earlier turn of
  /// the same rollout when the next context was not compacted, or an identical sample) is scored
  /// inside that sample's row (model::ScoreSpans). false: every sample runs its whole context.
  bool share_prompts = true;
  /// compute_old_logprobs takes a sample's old log-probs from its rollout_logp (when it has one
  /// per completion token) instead of a forward: the sampler computed them with the same weights
  /// and temperature, so only the numerics of the KV-cached decode differ (fp32: ~1e-6). Off
  /// (train.old_logprobs: recompute) for bf16, where the two differ by more.
  bool old_logprobs_from_rollout = false;
  /// ppo_update runs no forward or backward for a sample whose advantage is exactly 0 when there
  /// is no KL term (loss.kl_beta == 0 or no reference log-probs): its loss and gradient are exactly
  /// 0 (a GRPO group whose rewards are all equal is such a group). The step's weights, the
  /// optimizer steps and the parameters are those of the unskipped update; UpdateStats::entropy
  /// is then the mean over the samples that ran. false: every sample runs.
  bool skip_zero_advantage = true;
  /// Data-parallel group (not owned), or null for one process. With a group, every rank passes
  /// its own samples (counts may differ, even 0); mini_batch_size and grad_accum are per rank,
  /// so one optimizer step takes up to world_size * mini_batch_size * grad_accum samples. The
  /// aggregation normalizers and the gradients are summed over the ranks before clipping, so the
  /// step equals one process's step on the union of the ranks' samples; every rank must call.
  dist::ProcessGroup* group = nullptr;
};

/// What an update did.
struct UpdateStats {
  double loss = 0;            ///< mean over optimizer steps of the aggregated loss
  double grad_norm = 0;       ///< mean pre-clip global L2 norm over optimizer steps
  double clip_frac_low = 0, clip_frac_high = 0;  ///< token-weighted over all mini-batches
  double entropy = 0;         ///< mean per-token entropy (nats)
  double kl = 0;              ///< mean k3 to the reference (0 without one)
  int64_t optimizer_steps = 0;
  int64_t skipped_steps = 0;  ///< optimizer steps skipped for a non-finite loss or gradient
  int64_t samples_in_other_rows = 0;  ///< sample passes scored inside another sample's row (prompt sharing; this rank)
  int64_t samples_not_run = 0;  ///< sample passes left out by UpdateOptions::skip_zero_advantage (this rank)
  int64_t tokens_run = 0;  ///< token columns the training forwards ran: shared prefixes once, then the rows (padding included; this rank)
  std::vector<std::string> events;  ///< one line per skipped step
};

/// The LM-head chunk of the log-prob forwards: `configured` when > 0, else 512 positions on a
/// CUDA device (fewer, larger kernels; a [64, 512, 151936] bf16 chunk is 10 GB, within an H200's
/// memory beside a 1.5B model) and 64 on the CPU (a chunk's logits stay small in cache). Issue
/// "GPU I", A3.
int64_t logprob_chunk(int64_t configured, bool cuda);

/// Trained tokens per segment id over `samples` (samples without tokens are not counted).
std::map<int64_t, int64_t> segment_tokens(const std::vector<TrainSample>& samples);

/// Sets `weight` of every sample for segment_mean (DESIGN.md section 4, "Compaction"): token mean
/// inside each segment, then mean over segments, over the WHOLE RL step: w_i = 1 / (T_s * S),
/// T_s the tokens of i's segment and S the segments with tokens, both from `step_tokens` (the sum
/// of every rank's segment_tokens; a segment's turns may lie on several ranks and in several
/// optimizer steps, and count once). A sample without tokens gets 0. Throws leap::Error if a
/// sample's segment is missing from `step_tokens`.
void set_segment_weights(std::vector<TrainSample>& samples, const std::map<int64_t, int64_t>& step_tokens);

/// segment_tokens over this rank's samples summed with every other rank's (all-gather; every
/// rank must call), then set_segment_weights. `group` null: this process's samples only.
/// Throws leap::Error when a collective fails.
void set_step_segment_weights(std::vector<TrainSample>& samples, dist::ProcessGroup* group);

/// The loss weights of one optimizer step over samples[step_idx], in that order. segment_mean:
/// each sample's fixed `weight` times `steps_per_epoch`, so the steps of an epoch add up to one
/// segment mean over the whole RL step however the segments fall into steps (each step's loss
/// keeps the scale of a mean); throws leap::Error if a weight is unset. Other aggregations:
/// aggregation_weights over the step's samples, the normalizers summed over options.group's
/// ranks (every rank must call then).
std::vector<double> step_weights(const std::vector<TrainSample>& samples, const std::vector<size_t>& step_idx,
                                 const UpdateOptions& options, size_t steps_per_epoch);

/// Fills old_logp / old_logprob_mean of every sample with the current policy (no grad), and
/// ref_logp with `reference` when it is given (k3 KL). Batches of `mini_batch_size`. With
/// options.old_logprobs_from_rollout a sample whose rollout_logp has one value per completion
/// token takes those instead (no forward); the others are computed. Returns how many samples
/// were computed by a forward of the policy.
size_t compute_old_logprobs(model::Transformer& policy, model::Transformer* reference,
                            std::vector<TrainSample>& samples, const UpdateOptions& options);

/// Fills new_logprob_mean of every sample with the current policy (no grad).
void compute_new_logprob_means(model::Transformer& policy, std::vector<TrainSample>& samples,
                               const UpdateOptions& options);

/// Runs `ppo_epochs` epochs over `samples` (old log-probs must be filled; with segment_mean the
/// fixed weights too, set_step_segment_weights). Each epoch shuffles the share units of the
/// samples' contexts (plan_prompt_sharing over all samples: in practice one per task group) and,
/// inside each, the nests of samples whose tokens start one another's (a turn next to the turns
/// that continue it; identical samples together; a nest that would straddle a mini-batch
/// boundary waits for the first later one that fits), and cuts that order into optimizer steps, so
/// a group's samples train
/// together (as verl's mini-batches hold whole groups); each optimizer step takes
/// mini_batch_size * grad_accum samples, weighs them with step_weights, accumulates the gradients of its mini-batches, clips the global norm and steps
/// `optimizer`. A non-finite loss or gradient zeroes the gradients, skips the step and is
/// recorded in `events`; the weights stay as they were. `params` are the trained tensors.
/// With options.group: each epoch runs as many optimizer steps as the rank with the most
/// samples needs (a rank out of samples contributes zero gradient), the loss normalizers and
/// gradients are all-reduced (sum), clipping and the non-finite skip are decided on the reduced
/// values (the same on every rank), and the returned statistics are global. Throws leap::Error
/// when a collective fails (see dist::ProcessGroup).
UpdateStats ppo_update(model::Transformer& policy, torch::optim::Optimizer& optimizer,
                       const std::vector<at::Tensor>& params, std::vector<TrainSample>& samples,
                       const UpdateOptions& options);

/// One supervised step: minimises the token-mean negative log-likelihood of the completions
/// (the advantage is ignored), with the same clipping and non-finite skip. Returns the loss
/// (nats per token) or NaN when the step was skipped. With options.group each rank passes its
/// share of the batch (possibly none); the token count and gradients are summed over the ranks
/// and the returned loss is the global one.
double sft_step(model::Transformer& policy, torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                const std::vector<TrainSample>& samples, const UpdateOptions& options);

/// Global L2 norm of the parameters' gradients (those without one are skipped; 0 for none), as
/// torch.nn.utils.clip_grad_norm_ reports it: sqrt(sum over tensors of ||g||^2). Each tensor's
/// norm is accumulated in fp32 (_foreach_norm), their squares summed in fp64; one device-to-host
/// copy. NaN or inf in a gradient propagate.
double grad_norm(const std::vector<at::Tensor>& params);

}  // namespace leap::rl
