// Step 4 of an evaluation: correctness on several seeds, the candidate's job and the reference at once;
// and the output / input check every later timed run is held to as well (env/evaluation.hpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <future>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <sstream>

#include "env/evaluation.hpp"
#include "env/poison.hpp"
#include "env/reference.hpp"
#include "env/reference_cache.hpp"

namespace leap::env {

namespace {

/// Correctness seeds share one worker job (cpu backend) as long as all their inputs and outputs
/// fit in this many bytes of the job's shared memory (at most kMaxTimeoutRuns seeds a job): a
/// fresh sandboxed worker per seed cost a process start each, most of a short kernel's
/// correctness step (bench/env_cpu).
constexpr size_t kSeedJobBytes = size_t(64) << 20;

}  // namespace

std::vector<torch::Tensor> Evaluation::reference(const std::vector<torch::Tensor>& in) {
  std::shared_lock<DeviceLock> shared(v_.device_lock_, std::defer_lock);
  if (reference_on_device_) shared.lock();
  // No lock between grading threads: a TorchScript method may run on several threads at once,
  // and the thread count ThreadGuard sets is the calling thread's own (OpenMP's and MKL's per-
  // thread settings). (A verifier-wide mutex here made a second grading thread wait for the
  // first's references: 2 workers graded fewer answers a second than 1, 2026-12-06.)
  ThreadGuard threads(o_.threads);
  return task_.reference().run(task_, in);
}

namespace {

/// The feedback of output `bt` differing from the reference beyond tolerance.
std::string wrong_output_text(const BoundTensor& bt, const Comparison& c, const tasks::Tolerance& tol,
                              const torch::Tensor& got, const torch::Tensor& ref, const std::string& when) {
  std::ostringstream s;
  s << "wrong output " << when << ": output '" << bt.name << "' (shape [";
  for (size_t d = 0; d < bt.shape.size(); ++d) s << (d ? ", " : "") << bt.shape[d];
  s << "]): " << c.mismatches << " of " << c.numel << " elements differ";
  if (at::isFloatingType(ref.scalar_type()))
    s << " beyond tolerance (|out - ref| <= " << fmt_num(c.atol_eff) << " + " << fmt_num(tol.rtol) << " * |ref|)\n";
  else  // integer and bool outputs are compared exactly (compare_outputs), whatever the task's tolerance
    s << " (" << c10::toString(ref.scalar_type()) << " outputs must equal the reference exactly)\n";
  s << "max abs error: " << fmt_num(c.max_abs_error) << " at index " << index_text(c.max_index, bt.shape) << "\n";
  s << "first bad index: " << index_text(c.first_bad, bt.shape) << ": expected ";
  if (!at::isFloatingType(ref.scalar_type()) && c.first_bad >= 0 && c.first_bad < ref.numel())  // exact, not via double
    s << ref.reshape({-1})[c.first_bad].item<int64_t>() << ", got " << got.reshape({-1})[c.first_bad].item<int64_t>();
  else
    s << fmt_num(c.first_expected) << ", got " << fmt_num(c.first_got);
  // The pre-fill's exact bits (a NaN the code computed, such as 0/0 or inf/inf, is not blamed on
  // an element left unwritten).
  const torch::Tensor flat = got.contiguous().reshape({-1});
  const bool prefill = c.first_bad >= 0 && c.first_bad < flat.numel() &&
                       is_poison(static_cast<const char*>(flat.data_ptr()) + c.first_bad * flat.element_size(), bt.dtype);
  if (std::isnan(c.first_got) && !std::isnan(c.first_expected))
    s << (prefill ? " (NaN: outputs are pre-filled with NaN, so this element was probably never written, or was "
                    "computed from the pre-fill, e.g. `+=` into an output not cleared first)"
                  : " (a NaN the code computed, not the pre-fill's: look for 0/0, inf - inf or inf/inf, such as an "
                    "exp that overflowed)");
  else if (!at::isFloatingType(ref.scalar_type()) && c.first_got != c.first_expected &&
           (c.first_got == static_cast<double>(std::numeric_limits<int64_t>::min()) || c.first_got == 165.0))
    s << " (the pre-fill sentinel: this element was probably never written)";
  return s.str();
}

}  // namespace

std::optional<EvalResult> Evaluation::check_outputs(const SharedBuffers& buf, const std::vector<int>& index,
                                                    const std::vector<torch::Tensor>& inputs,
                                                    const std::vector<torch::Tensor>& refs, const std::string& when,
                                                    bool check_inputs) {
  std::vector<torch::Tensor> got;
  for (size_t j = 0; j < n_out_; ++j)
    got.push_back(read_tensor(buf, static_cast<size_t>(index[n_in_ + j]), bound_.tensors[n_in_ + j]));
  if (auto bad = check_output_values(got, refs, when)) return bad;
  if (check_inputs) return check_inputs_unchanged(buf, index, inputs, when);
  return std::nullopt;
}

std::optional<EvalResult> Evaluation::check_inputs_unchanged(const SharedBuffers& buf, const std::vector<int>& index,
                                                             const std::vector<torch::Tensor>& inputs,
                                                             const std::string& when) {
  for (size_t i = 0; i < n_in_; ++i) {
    const BoundTensor& bt = bound_.tensors[i];
    torch::Tensor now = read_tensor(buf, static_cast<size_t>(index[i]), bt);
    torch::Tensor was = inputs[i].scalar_type() == torch::kBool ? inputs[i].to(torch::kByte) : inputs[i];
    if (std::memcmp(now.data_ptr(), was.contiguous().data_ptr(), static_cast<size_t>(was.nbytes())) == 0) continue;
    int64_t first = now.reshape({-1}).ne(was.reshape({-1})).nonzero().numel() > 0
                        ? now.reshape({-1}).ne(was.reshape({-1})).nonzero().index({0, 0}).item<int64_t>()
                        : 0;
    EvalResult r = fail(Verdict::inputs_modified,
                        "inputs modified " + when + ": input '" + bt.name + "' was written to (first changed element " +
                            index_text(first, bt.shape) + "); inputs are read-only, use an output or scratch buffer");
    r.details["input"] = bt.name;
    return r;
  }
  return std::nullopt;
}

std::optional<EvalResult> Evaluation::check_output_values(const std::vector<torch::Tensor>& got,
                                                          const std::vector<torch::Tensor>& refs,
                                                          const std::string& when) {
  const tasks::Tolerance tol = task_.spec().tolerance;
  for (size_t j = 0; j < n_out_; ++j) {
    const BoundTensor& bt = bound_.tensors[n_in_ + j];
    Comparison c = compare_output(got.at(j), refs[j], tol.atol, tol.rtol, declared_rms_[j]);
    if (c.ok) continue;
    EvalResult r = fail(Verdict::wrong_output, wrong_output_text(bt, c, tol, got.at(j), refs[j], when));
    r.details["output"] = bt.name;
    r.details["max_abs_error"] = fmt_num(c.max_abs_error);
    r.details["mismatches"] = std::to_string(c.mismatches);
    r.details["first_bad_index"] = index_text(c.first_bad, bt.shape);
    return r;
  }
  return std::nullopt;
}

int Evaluation::seeds_per_job() const {
  if (!reference_on_device_) return 1;  // cuda: outputs are device memory until the job ends
  size_t set_bytes = 0;
  for (size_t i = 0; i < n_in_ + n_out_; ++i) set_bytes += bound_.tensors[i].bytes();
  const size_t fit = kSeedJobBytes / std::max<size_t>(1, set_bytes);
  const int most = std::clamp(o_.correctness_seeds_per_job, 1, kMaxTimeoutRuns);
  return static_cast<int>(std::clamp<size_t>(fit, 1, static_cast<size_t>(most)));
}

std::optional<EvalResult> Evaluation::check_correctness() {
  const int per_job = seeds_per_job();
  for (int first = 0; first < o_.seeds; first += per_job)
    if (auto bad = check_seeds(first, std::min(per_job, o_.seeds - first))) return bad;
  return std::nullopt;
}

std::optional<EvalResult> Evaluation::check_seeds(int first, int count) {
  // The seeds' inputs and the reference's outputs on them are shared by every answer to this task.
  struct Seed {
    std::string key;
    std::shared_ptr<const ReferenceEntry> entry;
    std::string when;
  };
  std::vector<Seed> seeds;
  for (int k = 0; k < count; ++k) {
    const int s = first + k;
    const uint64_t seed = input_seed(task_, o_.seed, s);
    Seed sd;
    sd.key = ReferenceCache::key(task_, seed, o_.threads);
    sd.entry = v_.reference_cache_->inputs(sd.key, [&] { return make_inputs(task_, seed, s); });
    sd.when = "on seed " + std::to_string(s + 1) + " of " + std::to_string(o_.seeds) + " (inputs: " + inputs_text(task_, s) + ")";
    seeds.push_back(std::move(sd));
  }
  // One job, set k (its own inputs and outputs) in run k. With several seeds the parent copies
  // each run's outputs into its own memory as the worker reports the run (a later run cannot
  // rewrite them) and counts the runs made, so a failure is placed on its seed.
  BoundPlan plan = bound_;
  std::vector<std::vector<int>> rotations = add_rotated_sets(plan, n_in_ + n_out_, count);
  SharedBuffers buf(plan.tensors);
  auto fill = [&] {
    for (int k = 0; k < count; ++k) {
      const auto& rot = rotations[static_cast<size_t>(k)];
      for (size_t i = 0; i < n_in_; ++i) write_tensor(buf, static_cast<size_t>(rot[i]), seeds[static_cast<size_t>(k)].entry->inputs[i]);
      for (size_t j = 0; j < n_out_; ++j)
        prefill_output(buf, static_cast<size_t>(rot[n_in_ + j]), bound_.tensors[n_in_ + j]);
    }
  };
  fill();
  RunRequest req;  // no warm-up, one run a seed
  std::vector<std::vector<std::byte>> store;
  if (count > 1) {
    req.trials = count;
    req.rotations = rotations;
    req.parent_snapshots = true;
    req.timeout_per_run = true;  // each seed's run has one correctness run's limit, as a job of its own
    store.resize(static_cast<size_t>(count) * n_out_);
    req.snapshot_store = &store;
    for (int k = 0; k < count; ++k) {
      Snapshot snap;
      snap.run = k;
      for (size_t j = 0; j < n_out_; ++j)
        snap.copies.emplace_back(static_cast<int>(n_in_ + j), static_cast<int>(static_cast<size_t>(k) * n_out_ + j));
      req.snapshots.push_back(std::move(snap));
    }
  }
  // The reference's outputs on the seeds (kept in the cache for the other answers to this task)
  // are computed while the candidate's job runs in its worker.
  std::future<std::vector<std::vector<torch::Tensor>>> reference_outputs =
      std::async(std::launch::async, [&] {
        std::vector<std::vector<torch::Tensor>> out;
        for (const Seed& sd : seeds)
          out.push_back(v_.reference_cache_->outputs(sd.key, sd.entry, [&](const auto& in) { return reference(in); }));
        return out;
      });
  const RunOutcome run = retry_once_on_infra(
      [&](int attempt) {
        if (attempt) fill();  // once more, from the seeds' inputs and poisoned outputs again
        std::shared_lock<DeviceLock> shared(v_.device_lock_);  // correctness runs share the device
        return v_.pool_->run(comp_.artifact, plan, buf, req);
      },
      infra_retries_);
  const std::vector<std::vector<torch::Tensor>> seed_refs = reference_outputs.get();
  const int made = count > 1 ? run.runs_counted : (run.ok() ? 1 : 0);
  for (int k = 0; k < count; ++k) {
    const Seed& sd = seeds[static_cast<size_t>(k)];
    if (k >= made) {  // the job ended in this seed's run
      if (run.verdict == Verdict::infra_error) return infra(run.message + " (twice) [" + sd.when + "]");
      if (!run.ok()) return fail(run.verdict, run_failure_text(run) + " [" + sd.when + "]");
      return fail(Verdict::runtime_error, "internal: the correctness job made " + std::to_string(made) + " of " +
                                              std::to_string(count) + " runs [" + sd.when + "]");
    }
    const std::vector<torch::Tensor>& refs = seed_refs[static_cast<size_t>(k)];
    if (first + k == 0)
      for (size_t j = 0; j < n_out_; ++j) declared_rms_[j] = finite_rms(refs[j]);
    std::optional<EvalResult> bad;
    const auto& rot = rotations[static_cast<size_t>(k)];
    if (count > 1) {
      std::vector<torch::Tensor> got;
      for (size_t j = 0; j < n_out_; ++j)
        got.push_back(read_bytes_tensor(store.at(static_cast<size_t>(k) * n_out_ + j), bound_.tensors[n_in_ + j]));
      bad = check_output_values(got, refs, sd.when);
      if (!bad) bad = check_inputs_unchanged(buf, rot, sd.entry->inputs, sd.when);
    } else {
      bad = check_outputs(buf, rot, sd.entry->inputs, refs, sd.when);
    }
    if (bad) {
      bad->details["seed"] = std::to_string(first + k);
      return bad;
    }
  }
  if (!run.ok())  // after its last run: the reply was refused, or the worker died on its way out
    return fail(run.verdict, run_failure_text(run) + " [" + seeds.back().when + "]");
  return std::nullopt;
}

EvalResult Evaluation::correct_untimed() const {
  EvalResult ok = EvalResult::make(Verdict::correct, "", o_.feedback_max_chars);
  ok.feedback = bound_text("correct on " + std::to_string(o_.seeds) + " seeds (not timed)", o_.feedback_max_chars);
  return ok;
}

}  // namespace leap::env
