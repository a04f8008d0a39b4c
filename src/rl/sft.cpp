// The supervised warm start (docs/training.md "SFT warm start").
#include "rl/sft.hpp"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <spdlog/spdlog.h>

#include "env/task_runtime.hpp"
#include "rl/grader.hpp"
#include "rl/local_policy.hpp"
#include "rl/mutants.hpp"
#include "rl/prompts.hpp"
#include "store/store.hpp"
#include "tasks/task_spec.hpp"
#include "util/hash.hpp"
#include "util/log.hpp"

namespace leap::rl {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

/// The shipped solutions of `spec` for `backend` (solutions/<backend>_*.md), sorted.
std::vector<std::string> shipped_solutions(const tasks::TaskSpec& spec, const std::string& backend) {
  std::vector<std::string> out;
  const fs::path dir = fs::path(spec.dir) / "solutions";
  if (!fs::is_directory(dir)) return out;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(backend + "_", 0) == 0 && e.path().extension() == ".md") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f);
    out.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}


/// train.sft.mutants: for every shipped solution in `pool` (one per train task solution, in
/// order), grades up to 8 of its one-edit mutants (rl/mutants.hpp, tried in a seeded order) with
/// the environment and appends up to `mutants` of those judged wrong (wrong_output first, then
/// compile, launch or runtime errors; never `timeout` or `infra_error`) to `pool`. Returns "task: edit (verdict); ..."
/// for the log and the sft event.
namespace {

std::string add_wrong_twins(SftContext& c, std::vector<TrainSample>& pool) {
  constexpr size_t kTried = 8;
  std::mt19937_64 rng(util::mix_seed(c.exp.train.seed, 0x3A7));
  struct Candidate {
    const env::RuntimeTask* task;
    std::vector<int64_t> prompt_ids;
    Mutant mutant;
  };
  std::vector<std::vector<Candidate>> per_solution;
  std::vector<GradeRequest> requests;
  for (const auto* t : c.tasks) {
    const auto prompt = c.policy.encode_prompt(first_turn_messages(t->spec(), c.exp.env.backend));
    for (const auto& text : shipped_solutions(t->spec(), c.exp.env.backend)) {
      auto all = solution_mutants(text);
      std::shuffle(all.begin(), all.end(), rng);
      if (all.size() > kTried) all.resize(kTried);
      per_solution.emplace_back();
      for (auto& m : all) {
        requests.push_back({t, m.text});
        per_solution.back().push_back({t, prompt, std::move(m)});
      }
    }
  }
  const auto results = c.grader.grade(requests);
  std::string summary;
  size_t k = 0, added = 0;
  for (const auto& cands : per_solution) {
    std::vector<size_t> chosen;
    for (int pass = 0; pass < 2; ++pass)
      for (size_t i = 0; i < cands.size() && static_cast<int64_t>(chosen.size()) < c.exp.train.sft.mutants; ++i) {
        const auto v = results[k + i].verdict;
        const bool wrong = pass == 0 ? v == env::Verdict::wrong_output
                                     : v != env::Verdict::wrong_output && v != env::Verdict::correct &&
                                           v != env::Verdict::timeout && v != env::Verdict::infra_error;
        if (wrong) chosen.push_back(i);
      }
    for (size_t i : chosen) {
      TrainSample s;
      s.prompt_ids = cands[i].prompt_ids;
      s.completion_ids = c.policy.encode_completion(cands[i].mutant.text);
      pool.push_back(std::move(s));
      summary += fmt::format("{}{}: {} ({})", summary.empty() ? "" : "; ", cands[i].task->spec().name,
                             cands[i].mutant.edit, env::to_string(results[k + i].verdict));
      ++added;
    }
    k += cands.size();
  }
  spdlog::info("sft: {} wrong twins from {} solutions ({} mutants graded){}{}", added, per_solution.size(),
               requests.size(), summary.empty() ? "" : ": ", summary);
  return summary;
}

}  // namespace

/// Supervised warm start on the train split's shipped solutions (train.sft).
void run_sft(SftContext& c) {
  const auto& sft = c.exp.train.sft;
  std::vector<TrainSample> pool;
  for (const auto* t : c.tasks) {
    const auto prompt = c.policy.encode_prompt(first_turn_messages(t->spec(), c.exp.env.backend));
    for (const auto& text : shipped_solutions(t->spec(), c.exp.env.backend)) {
      TrainSample s;
      s.prompt_ids = prompt;
      s.completion_ids = c.policy.encode_completion(text);
      pool.push_back(std::move(s));
    }
  }
  if (pool.empty()) {
    spdlog::warn("train.sft: no solutions/{}_*.md in the train split of {}; SFT skipped", c.exp.env.backend,
                 c.exp.tasks.dir);
    return;
  }
  const size_t correct_solutions = pool.size();
  const std::string twins = sft.mutants > 0 ? add_wrong_twins(c, pool) : std::string();
  torch::optim::AdamW opt(c.params, torch::optim::AdamWOptions(sft.lr)
                                        .betas({c.exp.optim.beta1, c.exp.optim.beta2})
                                        .eps(c.exp.optim.eps)
                                        .weight_decay(c.exp.optim.weight_decay));
  UpdateOptions o = c.update;
  o.temperature = 1.0;
  std::mt19937_64 rng(util::mix_seed(c.exp.train.seed, 0x5F7));
  std::vector<size_t> order(pool.size());
  std::iota(order.begin(), order.end(), 0);
  size_t pos = order.size();
  util::Progress progress("sft", sft.steps, c.progress);
  const auto t0 = Clock::now();
  double first = std::nan(""), last = std::nan("");
  int64_t steps_run = 0;
  for (int64_t step = 1; step <= sft.steps && !(c.interrupted && *c.interrupted); ++step) {
    ++steps_run;
    std::vector<TrainSample> batch;
    for (int64_t b = 0; b < sft.batch_size; ++b) {
      if (pos >= order.size()) {
        std::shuffle(order.begin(), order.end(), rng);
        pos = 0;
      }
      const size_t k = order[pos++];
      if (b % c.world == c.rank) batch.push_back(pool[k]);  // data parallel: this rank's share
    }
    const double loss = sft_step(c.model, opt, c.params, batch, o);
    if (std::isnan(first)) first = loss;
    last = loss;
    // SFT metrics use steps <= 0 so that RL step numbers (and resume truncation) are unaffected.
    if (c.db) c.db->add_metric(c.run_id, step - sft.steps, "sft/loss", loss);
    progress.tick();
  }
  progress.finish();
  const std::string what = fmt::format("{} solutions{}", correct_solutions,
                                       twins.empty() ? std::string() : fmt::format(" + {} wrong twins", pool.size() - correct_solutions));
  spdlog::info("sft: {} steps on {}, loss {:.3f} -> {:.3f} nats/token, {:.1f} s", steps_run, what, first, last,
               std::chrono::duration<double>(Clock::now() - t0).count());
  if (c.db)
    c.db->add_event(c.run_id, 0, "sft",
                    fmt::format("{} of {} steps on {}, loss {:.4f} -> {:.4f}{}", steps_run, sft.steps, what, first, last,
                                twins.empty() ? std::string() : "; wrong twins: " + twins));
}


}  // namespace leap::rl
