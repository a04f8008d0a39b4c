// The supervised warm start (docs/training.md "SFT warm start").
#include "rl/sft.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "env/task_runtime.hpp"
#include "rl/grader.hpp"
#include "rl/local_policy.hpp"
#include "rl/mutants.hpp"
#include "rl/prompts.hpp"
#include "store/store.hpp"
#include "tasks/task_spec.hpp"
#include "util/error.hpp"
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


namespace {

/// One graded one-edit copy of a shipped solution.
struct Twin {
  const env::RuntimeTask* task;
  const std::string* solution;  ///< the correct text it was made from
  Mutant mutant;
  env::EvalResult result;
};

/// True for the verdicts a twin may have in pass 0 (wrong_output) or pass 1 (a compile, launch
/// or runtime error: never correct, timeout or infra_error).
bool twin_verdict(env::Verdict v, int pass) {
  if (pass == 0) return v == env::Verdict::wrong_output;
  return v != env::Verdict::wrong_output && v != env::Verdict::correct && v != env::Verdict::timeout &&
         v != env::Verdict::infra_error;
}

/// For every shipped solution (solutions[i] of tasks_of[i]), up to `need` wrong twins: its
/// one-edit mutants (rl/mutants.hpp) in a seeded order, the first 8 of them graded, wrong_output
/// ones taken first, then compile, launch or runtime errors. Grading runs in rounds (the k-th
/// candidate of every solution still short of `need` wrong_output twins), which takes the twins
/// grading all 8 would take with fewer environment calls. `graded` counts the calls.
std::vector<std::vector<Twin>> wrong_twins(SftContext& c, const std::vector<const env::RuntimeTask*>& tasks_of,
                                           const std::vector<std::string>& solutions, int64_t need, size_t& graded) {
  constexpr size_t kTried = 8;
  std::mt19937_64 rng(util::mix_seed(c.exp.train.seed, 0x3A7));
  std::vector<std::vector<Mutant>> cands(solutions.size());
  std::vector<std::vector<env::EvalResult>> results(solutions.size());
  const auto& kinds = c.exp.train.sft.mutant_kinds;
  for (size_t i = 0; i < solutions.size(); ++i) {
    cands[i] = solution_mutants(solutions[i]);
    if (!kinds.empty())
      std::erase_if(cands[i], [&](const Mutant& m) { return std::find(kinds.begin(), kinds.end(), m.kind) == kinds.end(); });
    std::shuffle(cands[i].begin(), cands[i].end(), rng);
    if (cands[i].size() > kTried) cands[i].resize(kTried);
  }
  // train.sft.twin_solutions: only a seeded sample of the solutions gets twins (its own stream, so
  // the candidates' order above is the same with or without the cap).
  const auto cap = static_cast<size_t>(c.exp.train.sft.twin_solutions);
  if (cap > 0 && cap < solutions.size()) {
    std::vector<size_t> idx(solutions.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::mt19937_64 pick(util::mix_seed(c.exp.train.seed, 0x7A1));
    std::shuffle(idx.begin(), idx.end(), pick);
    for (size_t k = cap; k < idx.size(); ++k) cands[idx[k]].clear();
  }
  graded = 0;
  for (size_t round = 0; round < kTried; ++round) {
    std::vector<GradeRequest> requests;
    std::vector<size_t> who;
    for (size_t i = 0; i < solutions.size(); ++i) {
      int64_t found = 0;
      for (const auto& r : results[i]) found += twin_verdict(r.verdict, 0) ? 1 : 0;
      if (found < need && round < cands[i].size()) {
        requests.push_back({tasks_of[i], cands[i][round].text});
        who.push_back(i);
      }
    }
    if (requests.empty()) break;
    auto out = c.grader.grade(requests);
    graded += requests.size();
    for (size_t k = 0; k < who.size(); ++k) results[who[k]].push_back(std::move(out[k]));
  }
  std::vector<std::vector<Twin>> twins(solutions.size());
  for (size_t i = 0; i < solutions.size(); ++i)
    for (int pass = 0; pass < 2; ++pass)
      for (size_t k = 0; k < results[i].size() && static_cast<int64_t>(twins[i].size()) < need; ++k)
        if (twin_verdict(results[i][k].verdict, pass))
          twins[i].push_back({tasks_of[i], &solutions[i], cands[i][k], results[i][k]});
  return twins;
}

}  // namespace

namespace {

/// True for a verdict that shows a shipped solution is wrong: the verdicts a twin may have
/// (wrong_output, or a format, compile, launch or runtime error); not correct, and not a timeout
/// or an infra_error, which may be the machine's rather than the text's.
bool shows_wrong(env::Verdict v) { return twin_verdict(v, 0) || twin_verdict(v, 1); }

/// The first line of `text` (for a one-line warning).
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

/// Grades the shipped solutions (one environment call) and keeps those the environment does not
/// show to be wrong: a wrong one would be the warm start's target, and the source of its twins'
/// "correct" second turns. Warns for each one left out, and for one that timed out or met an
/// infra_error (kept). `left_out` counts the solutions left out.
void keep_graded_solutions(SftContext& c, std::vector<const env::RuntimeTask*>& tasks_of,
                           std::vector<std::string>& solutions, size_t& left_out) {
  if (solutions.empty()) return;
  std::vector<GradeRequest> requests;
  for (size_t i = 0; i < solutions.size(); ++i) requests.push_back({tasks_of[i], solutions[i]});
  const auto results = c.grader.grade(requests);
  std::vector<const env::RuntimeTask*> kept_tasks;
  std::vector<std::string> kept;
  for (size_t i = 0; i < solutions.size(); ++i) {
    const env::Verdict v = results.at(i).verdict;
    const std::string name = tasks_of[i]->spec().name;
    if (shows_wrong(v)) {
      spdlog::warn("sft: task {}: a shipped solution (solutions/{}_*.md) is {} ({}): left out of the warm start; fix "
                   "it or remove it",
                   name, c.exp.env.backend, env::to_string(v), first_line(results[i].feedback));
      ++left_out;
      continue;
    }
    if (v != env::Verdict::correct)
      spdlog::warn("sft: task {}: a shipped solution (solutions/{}_*.md) graded {} ({}); kept", name, c.exp.env.backend,
                   env::to_string(v), first_line(results[i].feedback));
    kept_tasks.push_back(tasks_of[i]);
    kept.push_back(std::move(solutions[i]));
  }
  tasks_of = std::move(kept_tasks);
  solutions = std::move(kept);
}

}  // namespace

SftPool build_sft_pool(SftContext& c) {
  const auto& sft = c.exp.train.sft;
  SftPool pool;
  std::vector<const env::RuntimeTask*> tasks_of;
  std::vector<std::string> solutions;
  for (const auto* t : c.tasks)
    for (auto& text : shipped_solutions(t->spec(), c.exp.env.backend)) {
      tasks_of.push_back(t);
      solutions.push_back(std::move(text));
    }
  keep_graded_solutions(c, tasks_of, solutions, pool.left_out);
  std::map<const env::RuntimeTask*, std::vector<int64_t>> prompt_of;
  for (size_t i = 0; i < solutions.size(); ++i) {
    auto& prompt = prompt_of[tasks_of[i]];
    if (prompt.empty()) prompt = c.policy.encode_prompt(first_turn_messages(tasks_of[i]->spec(), c.exp.env.backend));
    TrainSample s;
    s.prompt_ids = prompt;
    s.completion_ids = c.policy.encode_completion(solutions[i]);
    pool.samples.push_back(std::move(s));
  }
  pool.solutions = pool.samples.size();
  if (sft.teacher_error > 0) {  // a teacher with a systematic mistake: each solution's twin, drawn per batch
    pool.teacher_twins.resize(solutions.size());
    for (size_t i = 0; i < solutions.size(); ++i) {
      const std::string twin = systematic_twin(solutions[i], sft.mutant_kinds);
      if (twin != solutions[i]) pool.teacher_twins[i] = c.policy.encode_completion(twin);
    }
    spdlog::info("sft: {} of {} solutions have a site of the teacher's systematic mistake ({}); each draw of one is "
                 "that twin with probability {}",
                 pool.teacher_errors(), solutions.size(), fmt::join(sft.mutant_kinds, ", "), sft.teacher_error);
  }
  const int64_t need = std::max(sft.mutants, sft.second_turn);
  if (solutions.empty() || need <= 0) return pool;
  const auto twins = wrong_twins(c, tasks_of, solutions, need, pool.graded);
  size_t chosen = 0;
  for (const auto& list : twins)
    for (size_t k = 0; k < list.size(); ++k, ++chosen) {
      const Twin& tw = list[k];
      const std::string verdict(env::to_string(tw.result.verdict));
      if (static_cast<int64_t>(k) < sft.mutants) {  // the wrong answer as a turn-1 target
        TrainSample s;
        s.prompt_ids = prompt_of.at(tw.task);
        s.completion_ids = c.policy.encode_completion(tw.mutant.text);
        pool.samples.push_back(std::move(s));
        ++pool.wrong_twins;
      }
      if (static_cast<int64_t>(k) < sft.second_turn) {  // the turn after it: the correct answer
        TrainSample s;
        s.prompt_ids = c.policy.encode_prompt(next_turn_context(first_turn_messages(tw.task->spec(), c.exp.env.backend),
                                                                tw.mutant.text, verdict, tw.result.feedback,
                                                                tw.result.speedup));
        s.completion_ids = c.policy.encode_completion(*tw.solution);
        pool.samples.push_back(std::move(s));
        ++pool.second_turn;
      }
      pool.twins += fmt::format("{}{}: {} ({})", pool.twins.empty() ? "" : "; ", tw.task->spec().name, tw.mutant.edit,
                                verdict);
    }
  spdlog::info("sft: {} wrong twins of {} solutions ({} mutants graded): {} as turn-1 targets, {} as second-turn "
               "contexts{}{}",
               chosen, solutions.size(),
               pool.graded, pool.wrong_twins, pool.second_turn, pool.twins.empty() ? "" : ": ", pool.twins);
  return pool;
}

size_t SftPool::teacher_errors() const {
  return static_cast<size_t>(
      std::count_if(teacher_twins.begin(), teacher_twins.end(), [](const auto& ids) { return !ids.empty(); }));
}

TrainSample teacher_sample(const SftPool& pool, size_t i, double teacher_error, std::mt19937_64& rng) {
  TrainSample s = pool.samples.at(i);
  if (teacher_error > 0 && i < pool.teacher_twins.size() && !pool.teacher_twins[i].empty() &&
      std::uniform_real_distribution<double>(0.0, 1.0)(rng) < teacher_error)
    s.completion_ids = pool.teacher_twins[i];
  return s;
}

double sft_lr(const config::SftConfig& sft, int64_t step) {
  if (sft.schedule != "cosine" || sft.steps <= 1) return sft.lr;
  const double progress = static_cast<double>(step - 1) / static_cast<double>(sft.steps - 1);
  return sft.lr * 0.5 * (1.0 + std::cos(M_PI * progress));
}

CopyExamples::CopyExamples(const std::vector<TrainSample>& pool, int64_t tokens) : pool_(pool), tokens_(tokens) {
  if (tokens < 1) throw Error("train.sft.copy_tokens must be >= 1");
  for (size_t i = 0; i < pool.size(); ++i)
    if (!pool[i].prompt_ids.empty()) with_prompt_.push_back(i);
  if (with_prompt_.empty()) throw Error("train.sft.copy_steps: no SFT example has a prompt to copy from");
}

std::vector<TrainSample> CopyExamples::draw(int64_t count, std::mt19937_64& rng) const {
  std::vector<TrainSample> out;
  for (int64_t k = 0; k < count; ++k) {
    const auto& ids = pool_[with_prompt_[std::uniform_int_distribution<size_t>(0, with_prompt_.size() - 1)(rng)]].prompt_ids;
    const size_t len = std::min(ids.size(), static_cast<size_t>(tokens_));
    const size_t start = std::uniform_int_distribution<size_t>(0, ids.size() - len)(rng);
    TrainSample s;
    s.prompt_ids = ids;
    s.completion_ids.assign(ids.begin() + static_cast<std::ptrdiff_t>(start),
                            ids.begin() + static_cast<std::ptrdiff_t>(start + len));
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

/// What one phase of run_sft did.
struct PhaseStats {
  int64_t steps = 0;  ///< steps run (fewer than asked when interrupted)
  double first = std::nan(""), last = std::nan("");  ///< loss of the first and last step, nats/token
  double seconds = 0;
};

/// One phase of run_sft: up to `steps` steps of sft_step with `opt`, step s (1-based) at learning
/// rate lr_of(s) on this rank's share (every world-th example from the rank-th) of the whole batch
/// batch_of(s); the loss is stored as metric `metric` at step s + `metric_offset`. Stops after
/// the running step when interrupted.
template <class BatchOf, class LrOf>
PhaseStats run_phase(SftContext& c, torch::optim::AdamW& opt, const UpdateOptions& o, const char* label, int64_t steps,
                     const char* metric, int64_t metric_offset, BatchOf&& batch_of, LrOf&& lr_of) {
  util::Progress progress(label, steps, c.progress);
  const auto t0 = Clock::now();
  PhaseStats st;
  for (int64_t step = 1; step <= steps && !(c.interrupted && *c.interrupted); ++step) {
    ++st.steps;
    const double lr = lr_of(step);
    for (auto& group : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
    // Every rank draws the whole batch (the same seed) and keeps its share: data parallel.
    std::vector<TrainSample> all = batch_of(step), batch;
    for (size_t b = 0; b < all.size(); ++b)
      if (static_cast<int64_t>(b) % c.world == c.rank) batch.push_back(std::move(all[b]));
    const double loss = sft_step(c.model, opt, c.params, batch, o);
    if (std::isnan(st.first)) st.first = loss;
    st.last = loss;
    if (c.db) c.db->add_metric(c.run_id, step + metric_offset, metric, loss);
    progress.tick();
  }
  progress.finish();
  st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return st;
}

}  // namespace

/// Supervised warm start on the train split's shipped solutions (train.sft).
void run_sft(SftContext& c) {
  const auto& sft = c.exp.train.sft;
  SftPool built = build_sft_pool(c);
  const std::vector<TrainSample>& pool = built.samples;
  if (pool.empty()) {
    if (built.left_out > 0)
      spdlog::warn("train.sft: every one of the {} solutions/{}_*.md in the train split of {} was graded wrong (see "
                   "above); SFT skipped",
                   built.left_out, c.exp.env.backend, c.exp.tasks.dir);
    else
      spdlog::warn("train.sft: no solutions/{}_*.md in the train split of {}; SFT skipped", c.exp.env.backend,
                   c.exp.tasks.dir);
    return;
  }
  torch::optim::AdamW opt(c.params, torch::optim::AdamWOptions(sft.lr)
                                        .betas({c.exp.optim.beta1, c.exp.optim.beta2})
                                        .eps(c.exp.optim.eps)
                                        .weight_decay(c.exp.optim.weight_decay));
  UpdateOptions o = c.update;
  o.temperature = 1.0;
  // SFT metrics use steps <= 0 so that RL step numbers (and resume truncation) are unaffected; the
  // copy steps come before them.
  if (sft.copy_steps > 0) {  // induction warm-up on the set's own tokens (CopyExamples), constant lr
    const CopyExamples copies(pool, sft.copy_tokens);
    std::mt19937_64 copy_rng(util::mix_seed(c.exp.train.seed, 0xC0B7));
    const PhaseStats st = run_phase(
        c, opt, o, "sft copy", sft.copy_steps, "sft/copy_loss", -sft.copy_steps - sft.steps,
        [&](int64_t) { return copies.draw(sft.batch_size, copy_rng); }, [&](int64_t) { return sft.lr; });
    spdlog::info("sft: {} copy steps of {} tokens, loss {:.3f} -> {:.3f} nats/token, {:.1f} s", st.steps,
                 sft.copy_tokens, st.first, st.last, st.seconds);
    if (c.db)
      c.db->add_event(c.run_id, 0, "sft_copy",
                      fmt::format("{} of {} copy steps of {} tokens, loss {:.4f} -> {:.4f}, {:.1f} s", st.steps,
                                  sft.copy_steps, sft.copy_tokens, st.first, st.last, st.seconds));
  }
  std::mt19937_64 rng(util::mix_seed(c.exp.train.seed, 0x5F7));
  std::vector<size_t> order(pool.size());
  std::iota(order.begin(), order.end(), 0);
  size_t pos = order.size();
  const PhaseStats st = run_phase(
      c, opt, o, "sft", sft.steps, "sft/loss", -sft.steps,
      [&](int64_t) {
        std::vector<TrainSample> batch;
        for (int64_t b = 0; b < sft.batch_size; ++b) {
          if (pos >= order.size()) {
            std::shuffle(order.begin(), order.end(), rng);
            pos = 0;
          }
          batch.push_back(teacher_sample(built, order[pos++], sft.teacher_error, rng));
        }
        return batch;
      },
      [&](int64_t step) { return sft_lr(sft, step); });
  std::string what = fmt::format("{} solutions", built.solutions);
  if (built.left_out > 0) what += fmt::format(" ({} graded wrong and left out)", built.left_out);
  if (built.wrong_twins > 0) what += fmt::format(" + {} wrong twins", built.wrong_twins);
  if (built.second_turn > 0) what += fmt::format(" + {} second-turn examples", built.second_turn);
  if (const size_t with_twin = built.teacher_errors(); with_twin > 0)
    what += fmt::format(" ({} solutions drawn as the teacher's systematic twin ({}) with probability {})",
                        with_twin, fmt::join(sft.mutant_kinds, ", "), sft.teacher_error);
  spdlog::info("sft: {} steps on {}, loss {:.3f} -> {:.3f} nats/token, {:.1f} s", st.steps, what, st.first, st.last,
               st.seconds);
  if (c.db)
    c.db->add_event(c.run_id, 0, "sft",
                    fmt::format("{} of {} steps on {}, loss {:.4f} -> {:.4f}{}", st.steps, sft.steps, what, st.first, st.last,
                                built.twins.empty() ? std::string() : "; wrong twins: " + built.twins));
}

}  // namespace leap::rl
