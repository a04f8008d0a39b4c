#pragma once
// One Verifier::evaluate call as a pipeline of named steps (DESIGN.md section 3, docs/env.md
// "Verifier"): format -> compile -> bind -> correctness -> timing. Internal to src/env: the
// Verifier owns what outlives a call (backend, pool, locks, the CPU-check table); an Evaluation
// holds what one call builds up and is thrown away with it. Each step returns the failing
// EvalResult that ends the cascade, or nothing. Where each step lives:
//   verifier.cpp              the cascade (Verifier::evaluate)
//   eval_prepare.cpp          format, compile, bind; results for failures and infra errors
//   eval_correctness.cpp      output / input checks, the correctness seeds
//   eval_timing_job.cpp       a timing job's buffers and secret, and the check of what it returned
//   eval_reference_time.cpp   the reference's times (GPU worker or this CPU)
//   eval_cpu_bound.cpp        the CPU-time bound on a cpu candidate's reported times
//   eval_timing.cpp           one measurement, the suspicious re-measure, the final result
//   eval_util.cpp             small helpers shared by these files
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <torch/torch.h>

#include "env/binding.hpp"
#include "env/extract.hpp"
#include "env/launch_plan.hpp"
#include "env/run_sample.hpp"
#include "env/shared_buffers.hpp"
#include "env/verifier.hpp"
#include "util/median.hpp"

namespace leap::env {

/// Formats `v` with 6 significant digits ("%.6g").
std::string fmt_num(double v);
/// Formats a time in ms with 4 significant digits ("%.4g").
std::string fmt_ms(double v);
using util::median;  // NaN when empty (util/median.hpp)
/// Copies `t` (contiguous, same byte size) into tensor i of `buf`. Throws leap::Error on a size mismatch.
void write_tensor(SharedBuffers& buf, size_t i, const torch::Tensor& t);
/// Poisons tensor i of `buf` (env/poison.hpp: NaN, or the integer / byte sentinel).
void prefill_output(SharedBuffers& buf, size_t i, const BoundTensor& t);
/// A copy of tensor i of `buf` with `t`'s shape (bools read as uint8 so a sentinel byte stays visible).
torch::Tensor read_tensor(const SharedBuffers& buf, size_t i, const BoundTensor& t);
/// A copy of `bytes` (one tensor's, e.g. a parent-side snapshot) as a tensor of `t`'s shape and
/// dtype (bools as uint8). Throws leap::Error when the size is not the tensor's.
torch::Tensor read_bytes_tensor(const std::vector<std::byte>& bytes, const BoundTensor& t);
/// The feedback text of a failed worker run ("launch error: ...", "timeout: ...").
std::string run_failure_text(const RunOutcome& r);
/// "x: declared distribution, w: fixed values, ..." for correctness seed `seed_index` of `task`.
std::string inputs_text(const RuntimeTask& task, int seed_index);
/// Rotated input/output sets for a timing job: R - 1 renamed copies ("name#r") of the plan's
/// first `count` tensors are appended to `plan`; returns rotation r's tensor index for every
/// position (identity for the positions not copied and for r = 0).
std::vector<std::vector<int>> add_rotated_sets(BoundPlan& plan, size_t count, int R);
/// Output slots for a job reported in blocks of `slots` runs (RunRequest::report_every): extends
/// `rotations` (R sets over the first n_in + n_out positions, from add_rotated_sets) to `slots`
/// rotations, slot b reading input set b % R and writing its own renamed copies ("name@slot b")
/// of the outputs, appended to `plan`. `slots` is a multiple of R, so run t reads set t % R.
void add_output_slots(BoundPlan& plan, std::vector<std::vector<int>>& rotations, size_t n_in, size_t n_out,
                      int slots);
/// A timing job's request from the verifier's schedule (warm-up, trials, time box) over `rotations`.
RunRequest timing_request(const VerifierOptions& o, const std::vector<std::vector<int>>& rotations);

/// Runs a worker job and, when its reply is an infra_error (the device was out of memory: not the
/// answer's doing; docs/env.md "Infrastructure errors"), runs it once more. `attempt(k)` makes
/// try k (0, then 1) from a fresh start; `retries` counts the second tries. Returns the last
/// try's outcome. The one out-of-memory retry of every job the verifier runs.
template <class Attempt>
RunOutcome retry_once_on_infra(Attempt&& attempt, int& retries) {
  RunOutcome r = attempt(0);
  if (r.verdict != Verdict::infra_error) return r;
  ++retries;
  return attempt(1);
}

/// Sets at::set_num_threads for the reference and restores it afterwards. With LibTorch's OpenMP
/// backend the setting is the calling thread's own (OpenMP's nthreads ICV, MKL's local count), so
/// grading threads need no lock around it.
struct ThreadGuard {
  int saved;
  explicit ThreadGuard(int n);
  ~ThreadGuard();
};

/// One timing job of the candidate on fresh buffers: what it sends, and what came back.
struct TimingJob {
  BoundPlan plan;                           ///< the bound plan plus rotated sets and snapshot copies
  std::vector<std::vector<int>> rotations;  ///< per input set, tensor index of every position
  RunRequest request;                       ///< schedule, secret, rewrites, snapshots
  std::unique_ptr<SharedBuffers> buf;       ///< the job's shared memory
  /// The parent's own copies of checked runs' outputs (RunRequest::snapshot_store; parent
  /// snapshots only): never mapped by the worker.
  std::unique_ptr<std::vector<std::vector<std::byte>>> store;
  /// The checked runs drawn as they are made (RunRequest::sample): a cpu timing job whose run
  /// count depends on wall time (warmup_ms, min_timed_ms). Null: `request.snapshots`.
  std::unique_ptr<RunSample> sample;
  /// Where the parent copies the outputs of runs it does not check (RunRequest::snapshot_decoy).
  std::unique_ptr<std::vector<std::byte>> decoy;
  RunOutcome run;                           ///< the worker's reply
};

/// A candidate's median time (ms) over n trials, or the reference's.
struct Timed {
  double ms = 0;
  int n = 0;
};

/// The state of one Verifier::evaluate call and its steps (see the file comment).
class Evaluation {
 public:
  Evaluation(Verifier& verifier, const RuntimeTask& task);

  // -- Results that end the cascade (eval_prepare.cpp).
  /// A verdict with its feedback text, bounded to feedback_max_chars.
  EvalResult fail(Verdict v, const std::string& text) const;
  /// An infrastructure error (never scored): `what` in the text and details.
  EvalResult infra(const std::string& what) const;

  // -- Steps 1-3 (eval_prepare.cpp).
  /// 1. Extracts the code and launch-plan blocks and parses the plan; a format_error otherwise.
  std::optional<EvalResult> parse(std::string_view answer);
  /// 2. Compiles the code (cached by the backend); a compile_error otherwise.
  std::optional<EvalResult> compile();
  /// 3. Binds the plan to the task's sizes; a launch_error otherwise.
  std::optional<EvalResult> bind();

  // -- Step 4 (eval_correctness.cpp).
  /// 4. The candidate (in its worker) and the reference (here, at the same time) on `seeds` fresh
  /// input sets, outputs and inputs checked.
  std::optional<EvalResult> check_correctness();
  /// The result of an answer correct on every seed, before timing (`ok_` starts from it).
  EvalResult correct_untimed() const;

  // -- Step 5 (eval_timing.cpp).
  /// 5. Times candidate and reference (re-measured strictly when suspicious); the final result.
  EvalResult time();

 private:
  // Correctness (eval_correctness.cpp).
  /// The reference's outputs for `in`, run here on the CPU (device lock shared on the cpu backend).
  std::vector<torch::Tensor> reference(const std::vector<torch::Tensor>& in);
  /// Checks the outputs (then the inputs unless `check_inputs` is false) held in `buf` at tensor
  /// indices `index` against `refs`; a wrong_output / inputs_modified result naming `when`, or nothing.
  std::optional<EvalResult> check_outputs(const SharedBuffers& buf, const std::vector<int>& index,
                                          const std::vector<torch::Tensor>& inputs,
                                          const std::vector<torch::Tensor>& refs, const std::string& when,
                                          bool check_inputs = true);
  /// Checks that the inputs held in `buf` at tensor indices `index` still equal `inputs`: an
  /// inputs_modified result naming `when`, or nothing.
  std::optional<EvalResult> check_inputs_unchanged(const SharedBuffers& buf, const std::vector<int>& index,
                                                   const std::vector<torch::Tensor>& inputs, const std::string& when);
  /// How many correctness seeds one worker job runs: as many as fit kSeedJobBytes of shared
  /// memory, at most kMaxTimeoutRuns (cpu backend); 1 on cuda.
  int seeds_per_job() const;
  /// Seeds first .. first + count - 1 in one worker job (run k on seed first + k), each seed's
  /// outputs and inputs checked in order; the first failure, placed on its seed, or nothing.
  std::optional<EvalResult> check_seeds(int first, int count);
  /// Checks `got` (one tensor per output, in order) against `refs`: a wrong_output result naming
  /// `when`, or nothing.
  std::optional<EvalResult> check_output_values(const std::vector<torch::Tensor>& got,
                                                const std::vector<torch::Tensor>& refs, const std::string& when);

  // Timing jobs (eval_timing_job.cpp).
  /// The timing sets' inputs, which inputs are rewritten / perturbed per run, the run counts.
  void plan_timing();
  /// A timing job on fresh buffers with a fresh secret; `fixed_runs` > 0: a CPU-time check job
  /// (exactly that many runs, no time box, reported in blocks with an output slot per run of a
  /// block; check_job_sample runs checked, every run when strict, chosen here and kept here).
  TimingJob prepare_job(bool strict, int fixed_runs = 0) const;
  /// Replays the job's input rewrites and checks the checked runs and each set's last run against
  /// the reference; the failing result, or nothing with `out` the median reported time.
  std::optional<EvalResult> verify_job(const TimingJob& job, Timed& out);

  // The reference's times (eval_reference_time.cpp).
  /// Times the reference into `out`; returns why a GPU reference could not be timed (an
  /// infrastructure error: never a CPU time instead).
  std::optional<std::string> time_reference(Timed& out);

  // The CPU-time bound (eval_cpu_bound.cpp; env/cpu_time_bound.hpp).
  /// Compiles the no-op (cpu backend) before anything is timed; the CPU-check table's key.
  void prepare_cpu_bound();
  /// The no-op's job of the same shape (cpu backend; an empty outcome elsewhere).
  RunOutcome run_baseline(bool strict, int fixed_runs = 0);
  /// A CPU-time check job of exactly `n` runs between two no-op jobs; `use` gets the code's own CPU a run.
  std::optional<EvalResult> cpu_check(bool strict, int n, CpuUse& use, double& seconds);
  /// After a timing job: check jobs where the job was short or the bound tripped (cached per code).
  std::optional<EvalResult> resolve_cpu_use(bool strict, const TimingJob& job, double reported, double ref_ms,
                                            CpuUse& use);
  /// Applies the bound: over it, the candidate is timed by its CPU time (`cand_ms` raised) and flagged.
  void apply_cpu_bound(const CpuUse& use, double reported, double& cand_ms);
  CpuUse cpu_use_of(const RunOutcome& base, const RunOutcome& cand) const;
  bool cpu_over(const CpuUse& use, double reported) const;

  // Timing (eval_timing.cpp).
  /// One measurement: the candidate's timing job and the reference's times in one device window,
  /// then the job's checks and the CPU-time bound.
  std::optional<EvalResult> measure(bool strict, Timed& cand, Timed& ref);
  /// The correct result's feedback: times, speedup, notes, the profile line.
  std::string timing_feedback(const Timed& cand, const Timed& ref, double speedup, const std::string& note) const;

  Verifier& v_;
  const RuntimeTask& task_;
  const VerifierOptions& o_;
  int infra_retries_ = 0;  ///< worker jobs run again after an infra_error reply (out of memory)

  // Built by steps 1-3.
  ExtractedAnswer ans_;
  LaunchPlan plan_;
  CompileOutcome comp_;
  BoundPlan bound_;
  size_t n_in_ = 0, n_out_ = 0;
  bool reference_on_device_ = false;  ///< the reference runs on the device (the cpu backend's CPU)
  std::vector<double> declared_rms_;  ///< output scale for declared inputs (seed 1)

  // Built for timing.
  EvalResult ok_;                                     ///< the correct result, details added as timing goes
  std::vector<std::vector<torch::Tensor>> set_inputs_;  ///< the timing sets' inputs
  std::vector<int> rewrite_inputs_, perturb_inputs_;
  std::vector<UniformBounds> perturb_bounds_;  ///< parallel to perturb_inputs_ (RunRequest::perturb_bounds)
  int planned_runs_ = 0, max_runs_ = 0;
  size_t out_bytes_ = 0;                ///< one set's outputs
  std::string reference_device_ = "cpu";
  std::vector<double> cand_launch_ms_;  ///< per launch, from the first timing job's warm-up
  std::string cpu_note_;
  CpuUse cpu_use_;  ///< the last measurement's CPU a run (for a suspicious result's payout)
  /// The scratch's zero-fill capped the CPU-time check job below the runs that resolve the
  /// reported time (resolve_cpu_use): the candidate is charged at least its measured CPU a run.
  bool cpu_unresolved_ = false;
  std::string check_key_;  ///< code, plan, task and threads: the CPU-check table's key
};

}  // namespace leap::env
