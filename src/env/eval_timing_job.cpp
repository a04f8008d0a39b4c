// A timing job of the candidate (env/evaluation.hpp; docs/env.md "Timing"): several input sets
// rotated; every run starts from poisoned outputs and from inputs rewritten at secret positions
// (env/input_rewrite.hpp); the outputs of each set's last run and of runs drawn at random (every
// run when strict, or when cheap) are checked against the reference on exactly the inputs that
// run was given.
#include <algorithm>
#include <random>

#include "env/evaluation.hpp"
#include "env/input_rewrite.hpp"
#include "env/timing_schedule.hpp"
#include "env/reference.hpp"
#include "env/reference_cache.hpp"
#include "util/hash.hpp"

namespace leap::env {

namespace {

/// Every run of a timing job is checked when its snapshots fit in this many bytes and the
/// reference runs here on the CPU (cheap to run once per run); otherwise `checked_runs` drawn at
/// random plus each set's last run.
constexpr size_t kCheckEveryRunBytes = size_t(64) << 20;

/// A CPU-time check job reports its runs in blocks of at most this many (one exchange with the
/// parent per block), each run of a block writing its own output slot, the slots within
/// kBlockSlotBytes: 2048 runs of relu's 64-KB output were 2048 exchanges and 128 MB of snapshots
/// made, page by page, by the parent and the worker (bench/env_cpu).
constexpr int kMaxBlockRuns = 64;
constexpr size_t kBlockSlotBytes = size_t(16) << 20;

/// A timing job with warmup_ms or min_timed_ms keeps (and checks) up to this many of its runs, or
/// the every-run range of min_timed_ms when larger, drawn as they are made, as many as fit
/// `bytes` of outputs (env/run_sample.hpp).
constexpr size_t kMinSampledRuns = 256;
size_t sample_slots(size_t bytes, size_t out_bytes, int max_runs, int checked_runs) {
  size_t slots = bytes / std::max<size_t>(1, out_bytes);
  slots = std::min(slots, std::max<size_t>(static_cast<size_t>(max_runs), kMinSampledRuns));
  return std::max<size_t>(slots, static_cast<size_t>(std::max(1, checked_runs)));
}

/// A fresh secret for a job: its rewrite positions and checked runs, unknown to the candidate.
uint64_t fresh_secret(const std::string& artifact_key) {
  std::random_device rd;
  uint64_t secret = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ util::fnv1a64(artifact_key);
  return secret == 0 ? 1 : secret;
}

}  // namespace

void Evaluation::plan_timing() {
  const int R = o_.timing_sets;
  for (int r = 0; r < R; ++r) {  // generated once per task and seed (env/reference_cache.hpp)
    const uint64_t seed = input_seed(task_, o_.seed, o_.seeds + r);
    set_inputs_.push_back(
        v_.reference_cache_->inputs(ReferenceCache::key(task_, seed, o_.threads), [&] { return make_inputs(task_, seed, -1); })
            ->inputs);
  }
  // Rewritten (block copies): every input but fixed values (the problem's weights). Perturbed as
  // well, on the cpu backend: every element of a floating input changes for each run
  // (env/input_rewrite.hpp perturb_input: a normal input's mantissas redrawn, a uniform input's
  // values drawn afresh in its range), unless it must keep its declared distribution exactly
  // (`strict`), so neither a result kept from an earlier call nor a step from it (Taylor) is of
  // any use. (Integer-valued inputs, `strict` ones and the cuda backend: block rewrites only.)
  const auto& sizes = task_.interface().sizes;
  for (size_t i = 0; i < n_in_; ++i) {
    const tasks::InitSpec& init = task_.spec().inputs[i].init;
    // Fixed values are the problem's weights whichever way the task stores them (a file, or a
    // seeded draw the same on every seed): an answer may pack them once, as a module's
    // parameters are packed (seeded ones were rewritten, and such an honest answer judged wrong
    // where the same weights from a file passed: a red team, 2026-12-07).
    const bool fixed_value = init.kind == tasks::InitSpec::Kind::file || init.seed.has_value();
    if (!fixed_value) rewrite_inputs_.push_back(static_cast<int>(i));
    const DType dt = bound_.tensors[i].dtype;
    const bool floating = dt == DType::float32 || dt == DType::float64 || dt == DType::float16 || dt == DType::bfloat16;
    if (!reference_on_device_ || !floating || init.strict || init.seed) continue;
    if (init.kind == tasks::InitSpec::Kind::normal || init.kind == tasks::InitSpec::Kind::none) {
      perturb_inputs_.push_back(static_cast<int>(i));
      perturb_bounds_.push_back(UniformBounds{});
    } else if (init.kind == tasks::InitSpec::Kind::uniform) {
      const UniformBounds b{tasks::InitSpec::value(init.a, sizes), tasks::InitSpec::value(init.b, sizes)};
      if (!(b.high > b.low)) continue;  // a constant: nothing to draw
      perturb_inputs_.push_back(static_cast<int>(i));
      perturb_bounds_.push_back(b);
    }
  }
  planned_runs_ = std::max(std::max(0, o_.warmup) + o_.trials, R);
  // The most runs a job can make without warmup_ms (trials go on to min_timed_ms, at most 100 x).
  max_runs_ = std::max(std::max(0, o_.warmup) + (o_.min_timed_ms > 0 ? 100 : 1) * std::max(1, o_.trials), R);
  for (size_t j = 0; j < n_out_; ++j) out_bytes_ += bound_.tensors[n_in_ + j].bytes();
}

TimingJob Evaluation::prepare_job(bool strict, int fixed_runs) const {
  const int R = o_.timing_sets;
  TimingJob job;
  BoundPlan& tplan = job.plan;
  tplan = bound_;
  job.rotations = add_rotated_sets(tplan, n_in_ + n_out_, R);
  const uint64_t secret = fresh_secret(comp_.artifact.key);
  // Which runs are checked comes from a second secret that never leaves the parent: the first
  // goes to the worker (its input rewrites), and code in a cpu worker can read it there (a red
  // team rebuilt the shuffle below from it and computed only the checked runs: 6.4-9.8x on silu
  // against an honest 0.36x, 2026-12-06).
  const uint64_t check_secret = fresh_secret(comp_.artifact.key + "#checked");
  std::mt19937_64 pick(check_secret);
  const size_t budget = std::max<size_t>(size_t(256) << 20, 2 * out_bytes_);  // snapshot memory
  // A CPU-time check job (cpu backend): thousands of runs, reported to the parent in blocks, each
  // run of a block writing its own output slot, so the parent copies the checked runs' outputs
  // once their block is done: one exchange per block, and no outputs kept that are not checked.
  const bool check_job = fixed_runs > 0 && reference_on_device_;
  // With scratch (cpu backend), the parent zero-fills it after every run, so the runs are reported
  // one by one (RunRequest::parent_zeroes_scratch).
  bool has_scratch = false;
  for (const BoundTensor& t : bound_.tensors) has_scratch = has_scratch || (t.role == TensorRole::scratch && t.bytes() > 0);
  const bool zero_in_parent = reference_on_device_ && has_scratch;
  int block = 1;
  if (check_job && !zero_in_parent) {
    const size_t fit = std::min<size_t>(kMaxBlockRuns, kBlockSlotBytes / std::max<size_t>(1, out_bytes_));
    block = R * std::max(1, std::min(static_cast<int>(fit), fixed_runs) / R);
    add_output_slots(tplan, job.rotations, n_in_, n_out_, block);
  }
  // A cpu timing job whose run count depends on wall time (warmup_ms, min_timed_ms): its checked
  // runs are drawn by the parent as the runs are made (env/run_sample.hpp), every run made
  // equally likely, and as many as fit kCheckEveryRunBytes (all of them when the job makes no
  // more); a list drawn before the job could cover only the runs it was sure to make.
  const bool extensible = !check_job && fixed_runs <= 0 && (o_.warmup_ms > 0 || o_.min_timed_ms > 0);
  const bool sampled = extensible && reference_on_device_ && !o_.sample_in_worker;
  // ... and where the worker runs no host code of the answer (cuda: device code only), the
  // worker draws them itself, into slot tensors of the plan, and says which run each slot holds.
  const bool worker_sampled = extensible && !sampled;
  // Every run, where that is cheap: code that computes only the runs it guesses are checked
  // (or reads which ones from its own process's memory) then fails on any other.
  const bool every_run =
      fixed_runs > 0 ||
      (reference_on_device_ && static_cast<size_t>(max_runs_) * std::max<size_t>(1, out_bytes_) <= kCheckEveryRunBytes);
  const int n_runs = fixed_runs > 0 ? fixed_runs : every_run ? max_runs_ : planned_runs_;
  std::vector<int> runs(static_cast<size_t>(n_runs));
  for (int t = 0; t < n_runs; ++t) runs[static_cast<size_t>(t)] = t;
  std::shuffle(runs.begin(), runs.end(), pick);
  size_t n_checked = runs.size();
  if (check_job && !strict && o_.check_job_sample > 0)  // drawn here, kept here: the worker never sees the list
    n_checked = std::min(n_checked, static_cast<size_t>(o_.check_job_sample));
  else if (!strict && !every_run)
    n_checked = std::min(n_checked, static_cast<size_t>(std::max(0, o_.checked_runs)));
  n_checked = std::min(n_checked, budget / std::max<size_t>(1, out_bytes_));
  RunRequest& treq = job.request;
  treq = timing_request(o_, job.rotations);
  // The timing job's time limit covers the fewest runs its schedule makes however slow each is; a
  // CPU-time check job (or a re-measure) of the same code gets the same, not one per run of its
  // thousands (an answer that slept in every check job held a grader 16 minutes).
  treq.timeout_runs = timeout_runs_of(treq, static_cast<size_t>(R));
  if (fixed_runs > 0) {
    treq.warmup = std::min(std::max(0, o_.warmup), fixed_runs - 1);
    treq.trials = fixed_runs - treq.warmup;
    treq.min_timed_ms = 0;
    treq.warmup_ms = 0;
    treq.max_seconds = 0;
  }
  treq.rewrite_seed = secret;
  treq.rewrite_inputs = rewrite_inputs_;
  treq.perturb_inputs = perturb_inputs_;
  treq.perturb_bounds = perturb_bounds_;
  // Only some runs checked (a CPU-time check job, or outputs too large to keep every run's): on
  // the cpu backend the parent copies them into its own memory, so code in the worker can neither
  // read which runs are checked nor rewrite a copy, and the parent counts the runs made
  // (WorkerPool, RunRequest::parent_snapshots).
  treq.parent_snapshots = reference_on_device_ && (check_job || sampled || !every_run);
  treq.report_every = block;
  treq.parent_zeroes_scratch = zero_in_parent;
  if (worker_sampled) {
    // Slot tensors: shared memory, and device memory on cuda.
    const size_t slots = sample_slots(kCheckEveryRunBytes, out_bytes_, max_runs_, o_.checked_runs);
    treq.worker_sample_slots = static_cast<int>(slots);
    treq.worker_sample_first = static_cast<int>(tplan.tensors.size());
    for (size_t j = 0; j < n_out_; ++j) treq.worker_sample_outputs.push_back(static_cast<int>(n_in_ + j));
    for (size_t slot = 0; slot < slots; ++slot)
      for (size_t j = 0; j < n_out_; ++j) {
        BoundTensor copy = bound_.tensors[n_in_ + j];
        copy.name += "@slot" + std::to_string(slot);
        tplan.tensors.push_back(copy);
      }
    treq.parent_snapshots = false;
    n_checked = 0;  // no list: drawn as the runs are made
  } else if (sampled) {
    const size_t slots = sample_slots(strict ? budget : kCheckEveryRunBytes, out_bytes_, max_runs_, o_.checked_runs);
    std::vector<int> outputs;
    for (size_t j = 0; j < n_out_; ++j) outputs.push_back(static_cast<int>(n_in_ + j));
    job.sample = std::make_unique<RunSample>(slots, check_secret, std::move(outputs));
    job.store = std::make_unique<std::vector<std::vector<std::byte>>>(job.sample->slots() * n_out_);
    treq.snapshot_store = job.store.get();
    treq.sample = job.sample.get();
    n_checked = 0;  // no list: drawn as the runs are made
  } else if (treq.parent_snapshots) {
    job.store = std::make_unique<std::vector<std::vector<std::byte>>>(n_checked * n_out_);
    treq.snapshot_store = job.store.get();
  }
  std::sort(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(n_checked));  // snapshot_for_run's order
  for (size_t k = 0; k < n_checked; ++k) {
    Snapshot snap;
    snap.run = runs[k];
    for (size_t j = 0; j < n_out_; ++j) {
      if (treq.snapshot_store) {
        snap.copies.emplace_back(static_cast<int>(n_in_ + j), static_cast<int>(k * n_out_ + j));
        continue;
      }
      BoundTensor copy = bound_.tensors[n_in_ + j];
      copy.name += "@run" + std::to_string(snap.run);
      snap.copies.emplace_back(static_cast<int>(n_in_ + j), static_cast<int>(tplan.tensors.size()));
      tplan.tensors.push_back(copy);
    }
    treq.snapshots.push_back(std::move(snap));
  }
  if (treq.snapshot_store && treq.parent_snapshots) {
    // Every run's pause the same copy: the checked runs' destinations and a decoy for the others,
    // all sized and touched now, before the job (RunRequest::snapshot_decoy).
    for (size_t k = 0; k < job.store->size(); ++k)
      (*job.store)[k].resize(bound_.tensors[n_in_ + k % std::max<size_t>(1, n_out_)].bytes());
    job.decoy = std::make_unique<std::vector<std::byte>>(out_bytes_);
    treq.snapshot_decoy = job.decoy.get();
  }
  job.buf = std::make_unique<SharedBuffers>(tplan.tensors);
  SharedBuffers& tbuf = *job.buf;
  for (size_t r = 0; r < job.rotations.size(); ++r) {
    const auto& rot = job.rotations[r];
    if (r < static_cast<size_t>(R))
      for (size_t i = 0; i < n_in_; ++i) write_tensor(tbuf, static_cast<size_t>(rot[i]), set_inputs_[r][i]);
    for (size_t j = 0; j < n_out_; ++j) prefill_output(tbuf, static_cast<size_t>(rot[n_in_ + j]), bound_.tensors[n_in_ + j]);
  }
  if (!treq.snapshot_store)
    for (const Snapshot& snap : treq.snapshots)
      for (const auto& [pos, dst] : snap.copies)
        prefill_output(tbuf, static_cast<size_t>(dst), bound_.tensors[static_cast<size_t>(pos)]);

  return job;
}

std::optional<EvalResult> Evaluation::verify_job(const TimingJob& job, Timed& out) {
  const int R = o_.timing_sets;
  const RunOutcome& run = job.run;
  const RunRequest& treq = job.request;
  const SharedBuffers& tbuf = *job.buf;
  const auto& rotations = job.rotations;
  const uint64_t secret = treq.rewrite_seed;
  if (!run.ok())
    return fail(run.verdict, run_failure_text(run) + " [during the timing runs, after passing the correctness checks]");
  if (run.times_ms.empty() || run.runs.empty()) return fail(Verdict::runtime_error, "internal: the timing job made no runs");

  // Replay the rewrites on copies of the sets, run by run, and check what the checked runs and
  // each set's last run returned against the reference on the same inputs.
  std::vector<RewriteTarget> targets;
  for (int p : rewrite_inputs_) {
    const BoundTensor& bt = bound_.tensors[static_cast<size_t>(p)];
    if (bt.numel() >= 2)
      targets.push_back(RewriteTarget{p, static_cast<size_t>(bt.numel()), bt.bytes() / static_cast<size_t>(bt.numel())});
  }
  std::vector<std::vector<torch::Tensor>> state(static_cast<size_t>(R));
  for (int r = 0; r < R; ++r)
    for (const auto& x : set_inputs_[static_cast<size_t>(r)]) state[static_cast<size_t>(r)].push_back(x.clone());
  std::vector<int> last_run(static_cast<size_t>(R), -1);
  for (int t : run.runs) last_run[static_cast<size_t>(t % R)] = t;
  // The checked runs: drawn before the job (the request's list) or while it ran (its sample).
  const bool drawn_in_job = job.sample || treq.worker_sample_slots > 0;
  const std::vector<Snapshot> drawn =
      job.sample ? job.sample->snapshots()
      : treq.worker_sample_slots > 0 ? snapshots_of_slots(run.sampled_runs, treq.worker_sample_outputs, treq.worker_sample_first)
                                     : std::vector<Snapshot>{};
  auto find_snapshot = [&](int t) -> const Snapshot* {
    if (!drawn_in_job) return snapshot_for_run(treq, t);
    auto it = std::lower_bound(drawn.begin(), drawn.end(), t, [](const Snapshot& s, int r) { return s.run < r; });
    return it != drawn.end() && it->run == t ? &*it : nullptr;
  };
  const std::string total_text = std::to_string(run.runs.size());
  int ordinal = 0;
  for (int t : run.runs) {
    ++ordinal;
    const size_t set = static_cast<size_t>(t % R);
    std::vector<void*> ptrs;
    for (auto& x : state[set]) ptrs.push_back(x.data_ptr());
    apply_rewrites(input_rewrites(secret, t, targets), ptrs);
    for (size_t k = 0; k < treq.perturb_inputs.size(); ++k) {
      const int p = treq.perturb_inputs[k];
      const BoundTensor& bt = bound_.tensors[static_cast<size_t>(p)];
      perturb_input(secret, t, p, bt.dtype, ptrs[static_cast<size_t>(p)], static_cast<size_t>(bt.numel()),
                    treq.perturb_bounds_of(k));
    }
    const Snapshot* snap = find_snapshot(t);
    if (!snap || t == last_run[set]) continue;  // each set's last: below
    std::vector<torch::Tensor> got;
    for (const auto& [pos, dst] : snap->copies) {
      const BoundTensor& bt = bound_.tensors[static_cast<size_t>(pos)];
      got.push_back(job.store ? read_bytes_tensor(job.store->at(static_cast<size_t>(dst)), bt)
                              : read_tensor(tbuf, static_cast<size_t>(dst), bt));
    }
    if (auto bad = check_output_values(got, reference(state[set]),
                                 "on timed call " + std::to_string(ordinal) + " of " + total_text + " (input set " +
                                     std::to_string(set + 1) + " of " + std::to_string(R) +
                                     "; the inputs change between calls, so every call must compute its result from "
                                     "the inputs it is given: a result kept from an earlier call is stale)")) {
      bad->details["timed_call"] = std::to_string(ordinal);
      return bad;
    }
  }
  for (int r = 0; r < R; ++r) {
    const auto& in = state[static_cast<size_t>(r)];
    // The outputs of the set's last run: its rotation (with output slots, slot t % slots).
    const int last = last_run[static_cast<size_t>(r)];
    const size_t rot = last >= 0 ? static_cast<size_t>(last) % rotations.size() : static_cast<size_t>(r);
    if (auto bad = check_outputs(tbuf, rotations[rot], in, reference(in),
                                 "after the timing loop (input set " + std::to_string(r + 1) + " of " +
                                     std::to_string(R) + "; results must not depend on earlier calls)"))
      return bad;
  }
  out.ms = median(run.times_ms);
  out.n = static_cast<int>(run.times_ms.size());
  return std::nullopt;
}

}  // namespace leap::env
