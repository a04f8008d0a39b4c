#include "rl/update.hpp"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <sstream>

#include "dist/process_group.hpp"
#include "model/autocast.hpp"
#include "rl/batch_layout.hpp"
#include "rl/prompt_sharing.hpp"
#include "util/error.hpp"

namespace leap::rl {

// Global L2 norm of the gradients (NaN/inf propagate): one multi-tensor norm kernel per dtype
// (_foreach_norm, each tensor's norm accumulated in fp32), the per-tensor norms combined in fp64,
// and one device-to-host copy, where a loop of fp64 copies synced once per parameter.
double grad_norm(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad().detach());
  if (grads.empty()) return 0.0;
  std::vector<at::Tensor> norms = at::_foreach_norm(grads, 2, at::kFloat);
  return at::stack(norms).to(at::kDouble).pow(2).sum().sqrt().item<double>();
}

namespace {

std::vector<std::vector<size_t>> chunks(const std::vector<size_t>& order, size_t size) {
  std::vector<std::vector<size_t>> out;
  size = std::max<size_t>(1, size);
  for (size_t i = 0; i < order.size(); i += size)
    out.emplace_back(order.begin() + static_cast<long>(i), order.begin() + static_cast<long>(std::min(order.size(), i + size)));
  return out;
}

/// Per-token log-probs [B, C] of the batch (autograd when enabled) and entropy, rows in idx
/// order: the shared prefixes run once, then every part against them; each part's [n, C_part]
/// is padded to C and the parts are put back in row order.
model::TokenLogProbs batch_logprobs(model::Transformer& m, const Batch& b, const UpdateOptions& o) {
  std::optional<model::AutocastScope> autocast;  // bf16 autocast on CUDA for the update
  if (o.autocast_bf16 && m->device().is_cuda()) autocast.emplace(model::AutocastState::enabled(at::kCUDA, at::kBFloat16));
  const double temperature = o.temperature > 0 ? o.temperature : 1.0;
  const int64_t chunk = logprob_chunk(o.logprob_chunk, m->device().is_cuda());
  model::PrefixKV kv;
  if (b.shared) kv = model::prefix_keys_values(m, b.prefix_tokens, b.prefix_mask, b.prefix_hidden_from);
  std::vector<torch::Tensor> lps, ents;
  std::vector<int64_t> rows;
  for (const auto& part : b.parts) {
    model::TokenLogProbs lp;
    const bool shared = b.shared && part.prefix_row.defined();
    // The part's rows attend to the prefix columns from prefix_drop on (the rest is padding to them).
    const model::PrefixKV pkv = shared ? kv.drop_columns(part.prefix_drop) : model::PrefixKV{};
    const torch::Tensor pmask =
        shared ? b.prefix_mask.narrow(1, part.prefix_drop, b.prefix_mask.size(1) - part.prefix_drop) : torch::Tensor();
    if (part.score.row.defined())
      lp = shared ? model::continue_logprobs(m, pkv, pmask, part.prefix_row, part.tokens, part.attention_mask, part.score,
                                             temperature, chunk)
                  : model::completion_logprobs(m, part.tokens, part.attention_mask, part.score, temperature, chunk);
    else
      lp = shared ? model::continue_logprobs(m, pkv, pmask, part.prefix_row, part.tokens, part.attention_mask,
                                             part.completion_len, temperature, chunk)
                  : model::completion_logprobs(m, part.tokens, part.attention_mask, part.completion_len, temperature,
                                               chunk);
    const int64_t pad = b.completion_len - lp.logprobs.size(1);  // spans are at most C wide
    lps.push_back(pad ? torch::constant_pad_nd(lp.logprobs, {0, pad}) : lp.logprobs);
    ents.push_back(pad ? torch::constant_pad_nd(lp.entropy, {0, pad}) : lp.entropy);
    rows.insert(rows.end(), part.rows.begin(), part.rows.end());
  }
  if (b.parts.size() == 1 && std::is_sorted(rows.begin(), rows.end())) return {lps[0], ents[0]};
  std::vector<int64_t> inverse(rows.size());
  for (size_t k = 0; k < rows.size(); ++k) inverse[static_cast<size_t>(rows[k])] = static_cast<int64_t>(k);
  auto inv = torch::tensor(inverse, torch::kInt64).to(b.completion_mask.device());
  return {torch::cat(lps, 0).index_select(0, inv), torch::cat(ents, 0).index_select(0, inv)};
}

void fill_logprobs(model::Transformer& m, std::vector<TrainSample>& samples, std::vector<size_t> order,
                   const UpdateOptions& o, const std::function<void(TrainSample&, const float*, int64_t)>& sink) {
  torch::NoGradGuard ng;
  // The order of a no-grad pass does not matter: sorted by context + completion, so samples
  // that share a prefix fall into the same batch, each earlier turn next to the turns that
  // continue it.
  if (o.share_prompts)
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return seq_less(samples[a], samples[b]); });
  for (const auto& idx : chunks(order, static_cast<size_t>(o.mini_batch_size))) {
    const Batch b = make_batch(samples, idx, o.pad_id, m->device(), o.share_prompts);
    auto lp = batch_logprobs(m, b, o).logprobs.to(torch::kCPU).to(torch::kFloat32).contiguous();
    for (size_t r = 0; r < idx.size(); ++r) {
      auto& s = samples[idx[r]];
      sink(s, lp[static_cast<int64_t>(r)].data_ptr<float>(), static_cast<int64_t>(s.completion_ids.size()));
    }
  }
}

std::vector<size_t> all_indices(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

double mean_of(const float* p, int64_t n) {
  double acc = 0;
  for (int64_t i = 0; i < n; ++i) acc += p[i];
  return n ? acc / static_cast<double>(n) : 0.0;
}


/// Gives every parameter without a gradient a zero one, so the optimizer steps it as the
/// backward of a zero loss would have (Adam's moments and step count move on).
void define_grads(const std::vector<at::Tensor>& params) {
  for (const auto& p : params)
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
}

void zero_grads(const std::vector<at::Tensor>& params) {
  for (const auto& p : params)
    if (p.grad().defined()) p.mutable_grad().zero_();
}

/// Sums the gradients of `params` over the ranks (one flat fp32 buffer; a parameter without a
/// gradient on this rank counts as zeros and gets the reduced gradient).
void all_reduce_gradients(dist::ProcessGroup& pg, const std::vector<at::Tensor>& params) {
  torch::NoGradGuard ng;
  if (params.empty()) return;
  std::vector<at::Tensor> flat;
  flat.reserve(params.size());
  for (const auto& p : params)
    flat.push_back((p.grad().defined() ? p.grad() : torch::zeros_like(p)).reshape({-1}).to(torch::kFloat32));
  at::Tensor buffer = torch::cat(flat);
  pg.all_reduce_sum(buffer);
  int64_t offset = 0;
  for (const auto& p : params) {
    at::Tensor g = buffer.narrow(0, offset, p.numel()).view(p.sizes()).to(p.dtype());
    offset += p.numel();
    if (p.grad().defined()) p.mutable_grad().copy_(g);
    else p.mutable_grad() = g.clone();
  }
}

/// Clips to max_norm (0: off) and steps, or skips on a non-finite loss or norm. Returns the norm.
/// With a group, `loss_sum` is this rank's share: the gradients and the loss are summed over the
/// ranks first and the decisions use the reduced values; `*loss_sum` becomes the global loss.
double finish_step(torch::optim::Optimizer& opt, const std::vector<at::Tensor>& params, double* loss_sum,
                   double max_norm, UpdateStats* stats, const std::string& what, dist::ProcessGroup* pg) {
  double norm = 0;
  if (pg) {
    all_reduce_gradients(*pg, params);
    const double local_norm = grad_norm(params);
    // Every rank holds the same reduced gradients; averaging the norms (and summing the
    // non-finite flags) makes the clip scale and the skip decision identical by construction.
    const auto r = pg->all_reduce_sum({*loss_sum, std::isfinite(local_norm) ? local_norm : 0.0,
                                       std::isfinite(local_norm) ? 0.0 : 1.0});
    *loss_sum = r[0];
    norm = r[2] > 0 ? std::nan("") : r[1] / static_cast<double>(pg->world_size());
  } else {
    norm = grad_norm(params);
  }
  if (!std::isfinite(*loss_sum) || !std::isfinite(norm)) {
    zero_grads(params);
    if (stats) {
      stats->skipped_steps += 1;
      stats->events.push_back(what + ": non-finite " + (std::isfinite(*loss_sum) ? "gradient" : "loss") +
                              " (loss " + std::to_string(*loss_sum) + ", grad norm " + std::to_string(norm) +
                              "); step skipped, weights unchanged");
    }
    return norm;
  }
  if (max_norm > 0 && norm > max_norm) {
    torch::NoGradGuard ng;
    const double scale = max_norm / (norm + 1e-6);
    for (const auto& p : params)
      if (p.grad().defined()) p.mutable_grad().mul_(scale);
  }
  opt.step();
  zero_grads(params);
  return norm;
}

}  // namespace

size_t compute_old_logprobs(model::Transformer& policy, model::Transformer* reference,
                            std::vector<TrainSample>& samples, const UpdateOptions& options) {
  std::vector<size_t> todo;
  for (size_t i = 0; i < samples.size(); ++i) {
    auto& s = samples[i];
    if (options.old_logprobs_from_rollout && !s.completion_ids.empty() &&
        s.rollout_logp.size() == s.completion_ids.size()) {
      s.old_logp = s.rollout_logp;
      s.old_logprob_mean = mean_of(s.old_logp.data(), static_cast<int64_t>(s.old_logp.size()));
    } else {
      todo.push_back(i);
    }
  }
  fill_logprobs(policy, samples, todo, options, [](TrainSample& s, const float* p, int64_t n) {
    s.old_logp.assign(p, p + n);
    s.old_logprob_mean = mean_of(p, n);
  });
  if (reference)
    fill_logprobs(*reference, samples, all_indices(samples.size()), options,
                  [](TrainSample& s, const float* p, int64_t n) { s.ref_logp.assign(p, p + n); });
  return todo.size();
}

void compute_new_logprob_means(model::Transformer& policy, std::vector<TrainSample>& samples,
                               const UpdateOptions& options) {
  fill_logprobs(policy, samples, all_indices(samples.size()), options,
                [](TrainSample& s, const float* p, int64_t n) { s.new_logprob_mean = mean_of(p, n); });
}

int64_t logprob_chunk(int64_t configured, bool cuda) {
  if (configured > 0) return configured;
  return cuda ? 512 : 64;
}

std::map<int64_t, int64_t> segment_tokens(const std::vector<TrainSample>& samples) {
  std::map<int64_t, int64_t> out;
  for (const auto& s : samples)
    if (!s.completion_ids.empty()) out[s.segment_id] += static_cast<int64_t>(s.completion_ids.size());
  return out;
}

void set_segment_weights(std::vector<TrainSample>& samples, const std::map<int64_t, int64_t>& step_tokens) {
  const double segments = static_cast<double>(step_tokens.size());
  for (auto& s : samples) {
    s.weight = 0;
    if (s.completion_ids.empty()) continue;
    const auto it = step_tokens.find(s.segment_id);
    if (it == step_tokens.end() || it->second <= 0)
      throw Error("set_segment_weights: segment " + std::to_string(s.segment_id) + " has no token count");
    s.weight = 1.0 / (static_cast<double>(it->second) * segments);
  }
}

void set_step_segment_weights(std::vector<TrainSample>& samples, dist::ProcessGroup* group) {
  auto tokens = segment_tokens(samples);
  if (group) {
    std::string mine;
    for (const auto& [id, n] : tokens) mine += std::to_string(id) + " " + std::to_string(n) + "\n";
    tokens.clear();
    for (const auto& part : group->all_gather_bytes(mine)) {
      std::istringstream in(part);
      int64_t id = 0, n = 0;
      while (in >> id >> n) tokens[id] += n;
    }
  }
  set_segment_weights(samples, tokens);
}

std::vector<double> step_weights(const std::vector<TrainSample>& samples, const std::vector<size_t>& step_idx,
                                 const UpdateOptions& o, size_t steps_per_epoch) {
  if (o.aggregation == Aggregation::segment_mean) {
    std::vector<double> w;
    for (size_t i : step_idx) {
      if (samples[i].weight < 0)
        throw Error("ppo_update: segment_mean weights are not set (call set_step_segment_weights first)");
      w.push_back(samples[i].weight * static_cast<double>(std::max<size_t>(1, steps_per_epoch)));
    }
    return w;
  }
  // Normalizers over the whole optimizer step (all ranks), so gradient accumulation is exact.
  std::vector<int64_t> ntok, seg;
  for (size_t i : step_idx) {
    ntok.push_back(static_cast<int64_t>(samples[i].completion_ids.size()));
    seg.push_back(samples[i].segment_id);
  }
  AggregationTotals totals = aggregation_totals(o.aggregation, ntok, seg, o.max_len);
  if (o.group) {
    const auto t = o.group->all_reduce_sum({static_cast<double>(totals.tokens), static_cast<double>(totals.samples),
                                            static_cast<double>(totals.segments)});
    totals = {std::llround(t[0]), std::llround(t[1]), std::llround(t[2])};
  }
  return aggregation_weights(o.aggregation, ntok, seg, o.max_len, totals);
}

namespace {

// ppo_update's steps: plan the mini-batch units once, order each epoch, run each optimizer step
// mini-batch by mini-batch, and keep the running totals of the step's statistics.

/// Samples that continue each other (nest_samples), and nests whose first samples share one
/// context (a cluster, its context run once); a unit is one share unit's clusters.
using Nest = std::vector<size_t>;
using Cluster = std::vector<Nest>;
using Unit = std::vector<Cluster>;

/// The share units of `samples` (a group's contexts, which start with the same task prompt, taken
/// together as verl's mini-batches take whole groups). Inside a unit, a sample stays next to the
/// samples that continue it (its rollout's later turns, identical samples), so a batch can score
/// them in one row; and nests whose first samples have the same context stay next to each other,
/// so a batch runs that whole context once. The units come from the contexts alone, so
/// train.share_prompts changes only how the batches are computed.
std::vector<Unit> mini_batch_units(const std::vector<TrainSample>& samples) {
  std::vector<const std::vector<int64_t>*> contexts;
  for (const auto& s : samples) contexts.push_back(&s.prompt_ids);
  std::vector<Unit> units;
  for (const auto& share : plan_prompt_sharing(contexts)) {
    const std::vector<size_t>& members = share.members;
    auto nests = nest_samples(members.size(), [&](size_t k) -> const TrainSample& { return samples[members[k]]; });
    for (auto& g : nests)
      for (auto& k : g) k = members[k];
    const auto context = [&](const Nest& g) -> const std::vector<int64_t>& { return samples[g.front()].prompt_ids; };
    std::stable_sort(nests.begin(), nests.end(), [&](const Nest& a, const Nest& b) { return context(a) < context(b); });
    Unit clusters;
    for (auto& g : nests) {
      if (clusters.empty() || context(clusters.back().front()) != context(g)) clusters.emplace_back();
      clusters.back().push_back(std::move(g));
    }
    units.push_back(std::move(clusters));
  }
  if (units.empty())  // a context of < 2 tokens: every sample on its own
    for (size_t i = 0; i < samples.size(); ++i) units.push_back({{{i}}});
  return units;
}

/// One epoch's sample order: the units shuffled, and inside each its clusters and their nests;
/// nests in that order, except that a nest which would straddle a mini-batch boundary (of `mb`
/// samples) waits for the first later one that fits the space left (a split nest runs as two rows).
std::vector<size_t> epoch_order(std::vector<Unit>& units, size_t mb, std::mt19937_64& rng) {
  std::vector<size_t> order;
  std::shuffle(units.begin(), units.end(), rng);
  for (auto& u : units) {
    std::shuffle(u.begin(), u.end(), rng);
    for (auto& c : u) std::shuffle(c.begin(), c.end(), rng);
    std::vector<const Nest*> pending;
    for (const auto& c : u)
      for (const auto& g : c) pending.push_back(&g);
    while (!pending.empty()) {
      const size_t space = mb - order.size() % mb;
      size_t pick = 0;
      for (size_t k = 0; k < pending.size(); ++k)
        if (pending[k]->size() <= space) {
          pick = k;
          break;
        }
      order.insert(order.end(), pending[pick]->begin(), pending[pick]->end());
      pending.erase(pending.begin() + static_cast<long>(pick));
    }
  }
  return order;
}

/// The running totals behind UpdateStats: token-weighted sums over every mini-batch, and sums
/// over optimizer steps.
struct UpdateTotals {
  double tokens_seen = 0;     ///< completion tokens, skipped samples' included (clip and KL shares)
  double entropy_tokens = 0;  ///< completion tokens that ran (entropy share)
  double clip_low = 0, clip_high = 0, kl = 0, entropy = 0;  ///< token-weighted sums
  double loss = 0, norm = 0;  ///< over optimizer steps with a finite value

  /// Adds one mini-batch of `tokens` masked tokens: its loss terms and its summed entropy (nats).
  void add_batch(const LossTerms& terms, double tokens, double entropy_sum) {
    tokens_seen += tokens;
    entropy_tokens += tokens;
    clip_low += terms.clip_frac_low * tokens;
    clip_high += terms.clip_frac_high * tokens;
    kl += terms.kl_mean * tokens;
    entropy += entropy_sum;
  }
  /// Sums the token-weighted totals over the ranks (every rank must call).
  void all_reduce(dist::ProcessGroup& pg) {
    const auto r = pg.all_reduce_sum({tokens_seen, clip_low, clip_high, entropy, kl, entropy_tokens});
    tokens_seen = r[0], clip_low = r[1], clip_high = r[2], entropy = r[3], kl = r[4], entropy_tokens = r[5];
  }
  /// The means into `st` (its step counts already set).
  void write(UpdateStats& st) const {
    const double good = static_cast<double>(std::max<int64_t>(1, st.optimizer_steps - st.skipped_steps));
    st.loss = loss / good;
    st.grad_norm = norm / good;
    if (tokens_seen > 0) {
      st.clip_frac_low = clip_low / tokens_seen;
      st.clip_frac_high = clip_high / tokens_seen;
      st.kl = kl / tokens_seen;
    }
    if (entropy_tokens > 0) st.entropy = entropy / entropy_tokens;
  }
};

/// Forward and backward of one mini-batch: samples[idx[r]] with loss weight weights[r]. Returns
/// its loss (NaN when not finite: then nothing is back-propagated).
double run_mini_batch(model::Transformer& policy, const std::vector<TrainSample>& samples,
                      const std::vector<size_t>& idx, const std::vector<double>& weights, bool with_ref,
                      const UpdateOptions& o, UpdateStats& st, UpdateTotals& totals) {
  const Batch b = make_batch(samples, idx, o.pad_id, policy->device(), o.share_prompts);
  const int64_t B = static_cast<int64_t>(idx.size()), C = b.completion_len;
  auto old_lp = torch::zeros({B, C}, torch::kFloat32);
  auto ref_lp = with_ref ? torch::zeros({B, C}, torch::kFloat32) : torch::Tensor();
  auto adv = torch::zeros({B}, torch::kFloat32);
  auto wt = torch::zeros({B}, torch::kFloat64);
  for (int64_t r = 0; r < B; ++r) {
    const auto& s = samples[idx[static_cast<size_t>(r)]];
    const int64_t n = static_cast<int64_t>(s.completion_ids.size());
    if (n) old_lp[r].narrow(0, 0, n).copy_(torch::from_blob(const_cast<float*>(s.old_logp.data()), {n}, torch::kFloat32));
    if (with_ref && n)
      ref_lp[r].narrow(0, 0, n).copy_(torch::from_blob(const_cast<float*>(s.ref_logp.data()), {n}, torch::kFloat32));
    adv[r] = s.advantage;
    wt[r] = weights[static_cast<size_t>(r)];
  }
  const auto dev = policy->device();
  for (const auto& part : b.parts) {
    st.samples_in_other_rows += static_cast<int64_t>(part.rows.size()) - part.tokens.size(0);
    st.tokens_run += part.tokens.numel();
  }
  if (b.shared) st.tokens_run += b.prefix_tokens.numel();
  auto lp = batch_logprobs(policy, b, o);
  LossTerms terms = policy_loss(lp.logprobs, old_lp.to(dev), with_ref ? ref_lp.to(dev) : torch::Tensor(), adv.to(dev),
                                b.completion_mask, wt.to(dev), o.loss);
  const double l = terms.loss.item<double>();
  if (std::isfinite(l)) terms.loss.backward();
  totals.add_batch(terms, b.completion_mask.sum().item<double>(),
                   (lp.entropy.detach() * b.completion_mask).sum().item<double>());
  return std::isfinite(l) ? l : std::nan("");
}

/// One optimizer step over samples[step_idx]: its mini-batches of `mb` samples (a sample with
/// advantage 0 and no KL term left out under skip_zero_advantage: it adds exactly 0 to the loss
/// and its gradient, pg = -min(ratio * 0, clip(ratio) * 0); its weight stays in the step's
/// normalizers and its tokens in the clip fractions, so the step is the one the unskipped path
/// takes), then finish_step. `steps_per_epoch` scales segment_mean weights (step_weights).
void run_optimizer_step(model::Transformer& policy, torch::optim::Optimizer& optimizer,
                        const std::vector<at::Tensor>& params, const std::vector<TrainSample>& samples,
                        const std::vector<size_t>& step_idx, size_t steps_per_epoch, size_t mb, bool with_ref,
                        const UpdateOptions& o, UpdateStats& st, UpdateTotals& totals) {
  const auto w = step_weights(samples, step_idx, o, steps_per_epoch);
  double step_loss = 0;
  bool ran = false;
  for (size_t start = 0; start < step_idx.size(); start += mb) {
    const size_t end = std::min(step_idx.size(), start + mb);
    std::vector<size_t> idx;
    std::vector<double> weights;
    for (size_t k = start; k < end; ++k) {
      const auto& s = samples[step_idx[k]];
      if (o.skip_zero_advantage && !with_ref && s.advantage == 0.0) {
        totals.tokens_seen += static_cast<double>(s.completion_ids.size());
        st.samples_not_run += 1;
        continue;
      }
      idx.push_back(step_idx[k]);
      weights.push_back(w[k]);
    }
    if (idx.empty()) continue;
    ran = true;
    step_loss += run_mini_batch(policy, samples, idx, weights, with_ref, o, st, totals);
  }
  if (!ran) define_grads(params);  // every sample skipped: step as on the zero gradient of a zero loss
  const double norm = finish_step(optimizer, params, &step_loss, o.max_grad_norm, &st,
                                  "update step " + std::to_string(st.optimizer_steps + 1), o.group);
  st.optimizer_steps += 1;
  if (std::isfinite(step_loss)) totals.loss += step_loss;
  if (std::isfinite(norm)) totals.norm += norm;
}

}  // namespace

UpdateStats ppo_update(model::Transformer& policy, torch::optim::Optimizer& optimizer,
                       const std::vector<at::Tensor>& params, std::vector<TrainSample>& samples,
                       const UpdateOptions& o) {
  UpdateStats st;
  dist::ProcessGroup* pg = o.group;
  if (samples.empty() && !pg) return st;
  for (const auto& s : samples)
    if (s.old_logp.size() != s.completion_ids.size())
      throw Error("ppo_update: old log-probs missing (call compute_old_logprobs first)");
  const bool with_ref = o.loss.kl_beta > 0 && !samples.empty() && !samples.front().ref_logp.empty();
  const size_t mb = static_cast<size_t>(std::max<int64_t>(1, o.mini_batch_size));
  const size_t step_size = mb * static_cast<size_t>(std::max<int64_t>(1, o.grad_accum));
  // Optimizer steps per epoch: the same on every rank (the one with the most samples decides).
  size_t n_steps = (samples.size() + step_size - 1) / step_size;
  if (pg) n_steps = static_cast<size_t>(pg->all_reduce_max({static_cast<double>(n_steps)})[0]);

  std::vector<Unit> units = mini_batch_units(samples);
  std::mt19937_64 rng(o.seed);
  UpdateTotals totals;
  for (int64_t epoch = 0; epoch < std::max<int64_t>(1, o.ppo_epochs); ++epoch) {
    auto steps = chunks(epoch_order(units, mb, rng), step_size);
    steps.resize(n_steps);  // a rank out of samples runs empty steps (zero gradient)
    for (const auto& step_idx : steps)
      run_optimizer_step(policy, optimizer, params, samples, step_idx, n_steps, mb, with_ref, o, st, totals);
  }
  if (pg) totals.all_reduce(*pg);
  totals.write(st);
  return st;
}

double sft_step(model::Transformer& policy, torch::optim::Optimizer& optimizer, const std::vector<at::Tensor>& params,
                const std::vector<TrainSample>& samples, const UpdateOptions& o) {
  dist::ProcessGroup* pg = o.group;
  if (samples.empty() && !pg) return std::nan("");
  double total_tokens = 0;
  for (const auto& s : samples) total_tokens += static_cast<double>(s.completion_ids.size());
  if (pg) total_tokens = pg->all_reduce_sum({total_tokens})[0];
  if (total_tokens <= 0) return std::nan("");
  std::vector<size_t> order(samples.size());
  std::iota(order.begin(), order.end(), 0);
  double loss_sum = 0;
  for (const auto& idx : chunks(order, static_cast<size_t>(std::max<int64_t>(1, o.mini_batch_size)))) {
    const Batch b = make_batch(samples, idx, o.pad_id, policy->device(), o.share_prompts);
    auto lp = batch_logprobs(policy, b, o);
    auto loss = -(lp.logprobs * b.completion_mask).sum() / total_tokens;
    const double l = loss.item<double>();
    loss_sum += l;
    if (std::isfinite(l)) loss.backward();
  }
  UpdateStats st;
  finish_step(optimizer, params, &loss_sum, o.max_grad_norm, &st, "sft step", pg);
  return st.skipped_steps ? std::nan("") : loss_sum;
}

}  // namespace leap::rl
