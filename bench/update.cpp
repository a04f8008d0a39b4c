// Benchmark (not a test): the policy update (old and reference log-probs, then one PPO epoch of
// forward + backward + optimizer steps) with prompt sharing against without, on quickstart-shaped
// samples: G groups of N rollouts, a P-token task prompt per group, R turn-2 samples per group
// whose context is the prompt plus an earlier completion and feedback (E tokens), C-token
// completions. The two sides alternate (unshared, shared, ...) and the median of the per-pair
// ratios shared / unshared is printed with its range. The defaults are the quickstart's steps as
// its store shows them: turn 1, 16 samples of ~570 context + ~200 completion tokens; turn 2, 5-11
// samples of ~930-1230 context (the turn-1 context, its completion and the feedback) + ~250-310.
// Every synthetic turn-2 context differs from the others past the task prompt: the worst case.
//
// --store DB replays a finished run's RL steps instead (the latest run, or --run ID): each turn's
// stored context and completion text, tokenized again with --tokenizer's tokenizer.json, becomes a
// sample with its stored advantage, and a side runs every step's update as that run's trainer did
// (the quickstart's settings: old log-probs from the rollout, no KL, segment_mean, temperature
// 0.7, max_len 400, mini-batches of --mini-batch); --step N replays step N only, --model DIR
// loads a checkpoint's weights instead of random ones, --verbose 1 prints each step's token
// columns run, --profile FILE writes a LibTorch profiler trace (Chrome JSON) of the shared side's
// replay, overwritten by each shared step (use it with --step). Summaries (compaction) are not stored as turns
// and are left out. The quickstart's policy runs on two threads (model.cpu_threads): pass
// --threads 2 to match it.
//   ninja -C build bench_update && ./build/bench_update [--pairs 5] [--preset tiny|qwen2.5-1.5b]
//       [--groups 2] [--group-size 8] [--prompt 570] [--turn2 4] [--extra 500] [--completion 220]
//       [--mini-batch 8] [--device cpu|cuda] [--dtype fp32|bf16] [--checkpointing 0|1] [--threads 0]
//       [--store results/leap.db [--run ID] [--tokenizer models/tiny] [--step N] [--model DIR]
//        [--verbose 1] [--profile trace.json]]
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <cstdio>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/hf_config.hpp"
#include "model/tokenizer.hpp"
#include "model/transformer.hpp"
#include "pairs.hpp"
#include "rl/prompt_sharing.hpp"
#include "rl/update.hpp"
#include "store/database.hpp"
#include "store/statement.hpp"

using namespace leap;

namespace {

std::string preset_config(const std::string& preset) {
  if (preset == "tiny")
    return R"({"model_type": "qwen2", "hidden_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
      "num_key_value_heads": 2, "intermediate_size": 384, "vocab_size": 1024, "max_position_embeddings": 4096,
      "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true})";
  if (preset == "qwen2.5-1.5b")
    return R"({"model_type": "qwen2", "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12,
      "num_key_value_heads": 2, "intermediate_size": 8960, "vocab_size": 151936, "max_position_embeddings": 32768,
      "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "tie_word_embeddings": true})";
  throw std::runtime_error("unknown preset " + preset + " (tiny, qwen2.5-1.5b)");
}

/// One RL step's samples as a finished run stored them.
struct StoredStep {
  int64_t step = 0;
  std::vector<rl::TrainSample> samples;
};

/// The RL steps of run `run_id` (empty: the latest run) in store `db_path`, each turn a sample:
/// its stored context and completion re-tokenized with `tok`, its stored advantage, a segment per
/// (rollout, segment index), the stop token put back at the end of a finished completion.
/// `mismatched` counts the turns whose token counts differ from the stored ones. Throws when the
/// store has no such run or the run no turns.
std::vector<StoredStep> load_run(const std::string& db_path, std::string* run_id, const model::Tokenizer& tok,
                                 int64_t* mismatched) {
  const auto stop_id = tok.token_to_id("<|im_end|>");
  if (!stop_id) throw std::runtime_error("the tokenizer has no <|im_end|> token");
  const int64_t stop = *stop_id;
  store::OpenOptions oo;
  oo.read_only = true;
  store::Database db(db_path, oo);
  if (run_id->empty()) {
    auto q = db.prepare("SELECT id FROM runs WHERE kind = 'train' ORDER BY started_at DESC, rowid DESC LIMIT 1");
    if (!q.step()) throw std::runtime_error(db_path + ": no runs");
    *run_id = q.column_text(0);
  }
  {
    auto r = db.prepare("SELECT 1 FROM runs WHERE id = ?1");
    r.bind_text(1, *run_id);
    if (!r.step()) throw std::runtime_error(db_path + ": no run " + *run_id);
  }
  auto q = db.prepare(
      "SELECT g.step, ro.id, t.segment_index, t.prompt, t.completion, t.prompt_tokens, t.completion_tokens, "
      "t.advantage FROM turns t JOIN rollouts ro ON t.rollout_id = ro.id JOIN groups g ON ro.group_id = g.id "
      "WHERE g.run_id = ?1 ORDER BY g.step, g.group_index, ro.rollout_index, t.turn_index");
  q.bind_text(1, *run_id);
  std::vector<StoredStep> steps;
  *mismatched = 0;
  while (q.step()) {
    const int64_t step = q.column_int64(0);
    if (steps.empty() || steps.back().step != step) steps.push_back({step, {}});
    rl::TrainSample s;
    const auto context = tok.encode(q.column_text(3)), completion = tok.encode(q.column_text(4));
    s.prompt_ids.assign(context.begin(), context.end());
    s.completion_ids.assign(completion.begin(), completion.end());
    // The stored completion text leaves out the stop token a finished turn ended with.
    if (static_cast<int64_t>(s.completion_ids.size()) < q.column_int64(6)) s.completion_ids.push_back(stop);
    if (static_cast<int64_t>(s.prompt_ids.size()) != q.column_int64(5) ||
        static_cast<int64_t>(s.completion_ids.size()) != q.column_int64(6))
      *mismatched += 1;
    s.segment_id = q.column_int64(1) * 4096 + q.column_int64(2);
    s.advantage = q.column_double(7);
    s.rollout_logp.assign(s.completion_ids.size(), -1.0f);  // old log-probs from the rollout
    steps.back().samples.push_back(std::move(s));
  }
  if (steps.empty()) throw std::runtime_error(db_path + ": run " + *run_id + " has no stored turns");
  return steps;
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> a = {{"--pairs", "5"},      {"--preset", "tiny"},     {"--groups", "2"},
                                          {"--group-size", "8"}, {"--prompt", "570"},      {"--turn2", "4"},
                                          {"--extra", "500"},    {"--completion", "220"},  {"--mini-batch", "8"},
                                          {"--device", "cpu"},   {"--dtype", "fp32"},      {"--checkpointing", "0"},
                                          {"--threads", "0"},    {"--store", ""},          {"--run", ""},
                                          {"--tokenizer", "models/tiny"}, {"--step", "0"}, {"--model", ""}, {"--verbose", "0"}, {"--profile", ""}};
  for (int i = 1; i < argc; i += 2) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::cout << "usage: bench_update [--option value]...; options and defaults:\n";
      for (const auto& [k, v] : a) std::cout << "  " << k << " " << (v.empty() ? "''" : v) << "\n";
      std::cout << "--store DB replays run --run (default: the latest train run) of a leap store; see bench/update.cpp\n";
      return 0;
    }
    if (!a.count(argv[i]) || i + 1 >= argc) {
      std::cerr << "bench_update: unknown option or missing value: " << argv[i] << "\n";
      return 2;
    }
    a[argv[i]] = argv[i + 1];
  }
  const auto I = [&](const char* k) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(a[k], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != a[k].size()) throw std::runtime_error(std::string(k) + ": not an integer: '" + a[k] + "'");
    return v;
  };
  try {
    if (I("--threads") > 0) at::set_num_threads(static_cast<int>(I("--threads")));
    const torch::Device dev = a["--device"] == "cuda" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
    const bool bf16 = a["--dtype"] == "bf16";
    model::Transformer policy = a["--model"].empty()
                                    ? model::Transformer(model::parse_model_config(preset_config(a["--preset"]), a["--preset"]))
                                    : model::load_transformer(a["--model"], torch::kFloat32, dev);
    model::Transformer reference(model::parse_model_config(preset_config(a["--preset"]), a["--preset"]));
    policy->to(dev);  // fp32 master weights; random values drawn where they live
    reference->to(dev, bf16 ? torch::kBFloat16 : torch::kFloat32);
    {
      torch::NoGradGuard ng;
      torch::manual_seed(0);
      if (a["--model"].empty())
        for (auto& p : policy->parameters()) p.normal_(0.0, 0.02);
      for (auto& p : reference->parameters()) p.normal_(0.0, 0.02);
    }
    policy->rotary.inv_freq = policy->rotary.inv_freq.to(dev);
    reference->rotary.inv_freq = reference->rotary.inv_freq.to(dev);
    policy->set_gradient_checkpointing(I("--checkpointing") != 0);
    const int64_t V = policy->config().vocab_size;
    std::mt19937_64 rng(1);
    auto ids = [&](int64_t n) {
      std::vector<int64_t> v(static_cast<size_t>(n));
      for (auto& t : v) t = 3 + static_cast<int64_t>(rng() % static_cast<uint64_t>(std::min<int64_t>(V, 1024) - 3));
      return v;
    };
    std::vector<rl::TrainSample> samples;
    for (int64_t g = 0; g < I("--groups"); ++g) {
      const auto prompt = ids(I("--prompt"));
      for (int64_t i = 0; i < I("--group-size") + I("--turn2"); ++i) {
        rl::TrainSample s;
        s.prompt_ids = prompt;
        if (i >= I("--group-size")) {  // a turn-2 context: the prompt, an earlier completion, feedback
          auto more = ids(I("--extra"));
          s.prompt_ids.insert(s.prompt_ids.end(), more.begin(), more.end());
        }
        s.completion_ids = ids(I("--completion") - 20 + static_cast<int64_t>(rng() % 41));
        s.advantage = static_cast<double>(static_cast<int64_t>(rng() % 200) - 100) / 100.0;
        s.segment_id = static_cast<int64_t>(samples.size());
        samples.push_back(std::move(s));
      }
    }
    // --store: a finished run's steps replace the synthetic samples.
    std::vector<StoredStep> replay;
    if (!a["--store"].empty()) {
      const auto tok = model::Tokenizer::from_file(a["--tokenizer"]);
      int64_t mismatched = 0;
      replay = load_run(a["--store"], &a["--run"], tok, &mismatched);
      if (I("--step") > 0) {  // one step only (to look at one step's cost)
        std::erase_if(replay, [&](const StoredStep& st) { return st.step != I("--step"); });
        if (replay.empty()) throw std::runtime_error("--step " + a["--step"] + ": the run has no such RL step");
      }
      size_t n = 0;
      int64_t ctx = 0, comp = 0;
      for (const auto& st : replay)
        for (const auto& s : st.samples) {
          n += 1;
          ctx += static_cast<int64_t>(s.prompt_ids.size());
          comp += static_cast<int64_t>(s.completion_ids.size());
          for (const auto* ids : {&s.prompt_ids, &s.completion_ids})
            for (auto t : *ids)
              if (t >= V)
                throw std::runtime_error("token id " + std::to_string(t) + " of --tokenizer " + a["--tokenizer"] +
                                         " is outside preset " + a["--preset"] + "'s vocabulary (" +
                                         std::to_string(V) + ")");
        }
      std::printf("bench_update: replaying run %s of %s: %zu RL steps, %zu samples (%lld context + %lld completion "
                  "tokens; %lld turns re-tokenize to other counts than stored)\n",
                  a["--run"].c_str(), a["--store"].c_str(), replay.size(), n, static_cast<long long>(ctx),
                  static_cast<long long>(comp), static_cast<long long>(mismatched));
    }
    std::vector<at::Tensor> params;
    for (auto& p : policy->parameters()) params.push_back(p);
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-6));
    auto replay_side = [&](bool share) {
      rl::UpdateOptions o;
      o.share_prompts = share;
      o.mini_batch_size = I("--mini-batch");
      o.aggregation = rl::Aggregation::segment_mean;
      o.temperature = 0.7;
      o.max_len = 400;
      o.old_logprobs_from_rollout = true;
      double total = 0;
      for (const auto& st : replay) {
        auto data = st.samples;
        const double t0 = bench::now_s();
        std::unique_ptr<torch::autograd::profiler::RecordProfile> prof;
        if (!a["--profile"].empty() && share)  // a trace of each shared step (the last one written stays)
          prof = std::make_unique<torch::autograd::profiler::RecordProfile>(a["--profile"]);
        rl::compute_old_logprobs(policy, nullptr, data, o);
        rl::set_step_segment_weights(data, nullptr);
        const auto us = rl::ppo_update(policy, opt, params, data, o);
        total += bench::now_s() - t0;
        if (I("--verbose") != 0)
          std::printf("  step %lld %s: %zu samples, %lld token columns run, %lld in other rows, %lld not run\n",
                      static_cast<long long>(st.step), share ? "shared" : "unshared", data.size(),
                      static_cast<long long>(us.tokens_run), static_cast<long long>(us.samples_in_other_rows),
                      static_cast<long long>(us.samples_not_run));
      }
      return total;
    };
    auto side = [&](bool share) {
      if (!replay.empty()) return replay_side(share);
      auto data = samples;
      rl::UpdateOptions o;
      o.share_prompts = share;
      o.mini_batch_size = I("--mini-batch");
      o.loss.kl_beta = 0.01;
      o.autocast_bf16 = bf16;
      o.max_len = I("--completion") + 20;
      if (dev.is_cuda()) torch::cuda::synchronize();
      const double t0 = bench::now_s();
      rl::compute_old_logprobs(policy, &reference, data, o);
      rl::ppo_update(policy, opt, params, data, o);
      if (dev.is_cuda()) torch::cuda::synchronize();
      return bench::now_s() - t0;
    };
    if (replay.empty()) {  // the synthetic samples, described
      std::vector<const std::vector<int64_t>*> contexts;
      for (const auto& s : samples) contexts.push_back(&s.prompt_ids);
      const double fraction = rl::shared_prompt_fraction(contexts, rl::plan_prompt_sharing(contexts));
      int64_t ctx = 0, comp = 0;
      for (const auto& s : samples) {
        ctx += static_cast<int64_t>(s.prompt_ids.size());
        comp += static_cast<int64_t>(s.completion_ids.size());
      }
      std::printf("bench_update: preset %s, %s %s, %zu samples (%lld context + %lld completion tokens), mini-batch %lld, "
                  "checkpointing %lld; shared, the step's contexts are %.0f%% of their tokens (more where a "
                  "mini-batch holds two units)\n",
                  a["--preset"].c_str(), a["--device"].c_str(), a["--dtype"].c_str(), samples.size(),
                  static_cast<long long>(ctx), static_cast<long long>(comp), static_cast<long long>(I("--mini-batch")),
                  static_cast<long long>(I("--checkpointing")), 100.0 * fraction);
    }
    std::fflush(stdout);
    const auto pairs = bench::alternate([&] { return side(false); }, [&] { return side(true); },
                                        static_cast<int>(I("--pairs")));
    for (size_t i = 0; i < pairs.ratio.size(); ++i)
      std::printf("pair %zu: unshared %.3f s, shared %.3f s, ratio %.3f\n", i + 1, pairs.a_s[i], pairs.b_s[i],
                  pairs.ratio[i]);
    std::printf("update time shared / unshared: %s (unshared median %.3f s, shared median %.3f s)\n",
                pairs.summary().c_str(), bench::median(pairs.a_s), bench::median(pairs.b_s));
  } catch (const std::exception& e) {
    std::cerr << "bench_update: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
