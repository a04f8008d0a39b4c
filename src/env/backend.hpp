#pragma once
// The device-neutral backend interface: compile a solution's code, then execute its bound
// launches inside a worker process. The cpu backend uses the host compiler; a cuda backend
// (NVRTC + driver API) plugs in through the same interface.
#include <atomic>
#include <cstddef>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "env/binding.hpp"
#include "env/extract.hpp"
#include "env/input_rewrite.hpp"
#include "env/launch_plan.hpp"
#include "env/verdict.hpp"

namespace leap::env {

/// A compiled module, usable by any worker process of the same machine.
struct Artifact {
  std::string backend;            ///< backend name ("cpu", "cuda")
  std::string path;               ///< compiled module on disk (.so for cpu)
  std::set<std::string> exports;  ///< entry points it defines; empty = unknown
  std::string key;                ///< compile-cache key (hex)
  bool from_cache = false;        ///< true if no compiler ran for this request
};

/// Result of Backend::compile.
struct CompileOutcome {
  bool ok = false;
  Artifact artifact;      ///< valid when ok
  std::string log;        ///< the compiler's full output
  std::string feedback;   ///< for the model when !ok: the first errors, bounded
  bool timed_out = false; ///< the compiler was killed at the time limit
  double seconds = 0;     ///< wall time spent (0 for a cache hit)
};

/// A task's TorchScript reference, as a worker needs it to run and time it on its device
/// (RunRequest::reference): the source travels, and the worker compiles it (once per process).
struct ReferenceProgram {
  std::string torchscript;  ///< TorchScript source defining `reference`; empty: use `file`
  std::string file;         ///< TorchScript module file (.pt) when `torchscript` is empty
  std::string task_file;    ///< the task's file, for messages
  int inputs = 0;           ///< tensors 0 .. inputs-1 (of each rotation) are its arguments, in order
};

class RunSample;

/// A copy made after one run of a timing job, outside the timed region, so the verifier can check
/// that run's outputs (RunRequest::snapshots).
struct Snapshot {
  int run = 0;  ///< run index (0-based, warm-up included)
  /// (position in the run's rotation, destination): the tensor at that position of the run's
  /// input set is copied into the destination, a tensor index in the plan, or with
  /// RunRequest::snapshot_store an index into that store.
  std::vector<std::pair<int, int>> copies;
};

/// How often to run the launch sequence in one worker job (the schedule: env/timing_schedule.hpp).
struct RunRequest {
  int warmup = 0;  ///< untimed runs first
  int trials = 1;  ///< timed runs
  /// Time box in seconds for the whole job (0: none). Warm-up stops once half of it is spent,
  /// trials once all of it is spent; at least one trial always runs.
  double max_seconds = 0;
  /// Rotated input sets: run r (warm-up and trials counted together) passes tensor
  /// `rotations[r % rotations.size()][i]` wherever a launch names tensor i. Empty: identity.
  /// Lets the verifier cycle several input/output sets so a kernel cannot cache results.
  std::vector<std::vector<int>> rotations;
  /// Set: this job runs and times the task's reference on the backend's device instead of the
  /// artifact (Backend::time_reference; only for a backend whose reference_device() is not
  /// empty). Same warm-up, trials, time box and rotations as a candidate job.
  std::optional<ReferenceProgram> reference;
  /// Non-zero: before every run of a multi-run job, the inputs at positions `rewrite_inputs` of
  /// the run's set are rewritten in place from this secret seed (env/input_rewrite.hpp).
  uint64_t rewrite_seed = 0;
  std::vector<int> rewrite_inputs;  ///< input positions (in a rotation) the rewrites may change
  /// Floating input positions (in a rotation) whose every element changes before each run, after
  /// the block rewrites (env/input_rewrite.hpp perturb_input); cpu backend.
  std::vector<int> perturb_inputs;
  /// Parallel to `perturb_inputs`: the range of a uniform input (fresh values in [low, high));
  /// high <= low: an unbounded one (every mantissa bit flipped at random). Empty: all unbounded.
  std::vector<UniformBounds> perturb_bounds;

  /// The uniform range of perturb_inputs[k], or nullptr when it is unbounded.
  const UniformBounds* perturb_bounds_of(size_t k) const {
    return k < perturb_bounds.size() && perturb_bounds[k].high > perturb_bounds[k].low ? &perturb_bounds[k] : nullptr;
  }
  /// Set (env.profile_feedback): a backend that can time each launch of a multi-launch plan does
  /// so in the untimed warm-up runs (cuda: events between launches) and reports
  /// RunOutcome::launch_ms; the timed trials are never touched. Feedback only, never a reward.
  bool profile_launches = false;
  /// Outputs copied after chosen runs (the verifier checks them against the reference), sorted
  /// by run (snapshot_for_run's fast path).
  std::vector<Snapshot> snapshots;
  /// The parent makes the `snapshots` copies itself (WorkerPool): the list never reaches the
  /// worker, which reports each run it made and waits for the parent before the next one
  /// (`on_run_done`). For jobs that check only some runs (large outputs): code in the worker can
  /// then neither read which runs are checked nor claim runs it did not make (the parent counts
  /// them). Issue "Environment V".
  bool parent_snapshots = false;
  /// Multi-run jobs of the cpu backend whose plan has scratch: the parent zero-fills the scratch
  /// between runs (the worker reports each run, as with `parent_snapshots` and `report_every` 1,
  /// and waits for the parent's "go"), so the zero-fill is no CPU of the worker's. Zero-filled by
  /// the worker (before 2026-12-07) it was in the CPU the bound measures, job and no-op alike, with
  /// noise of milliseconds a run for a large scratch: code that declared an unused 256-MiB scratch
  /// hid a timer forged 10-15x inside that noise (a red team: 0.5x honest, paid 4.4-9.4x).
  bool parent_zeroes_scratch = false;
  /// A no-op job (cpu backend): every launch calls the worker's own empty kernel instead of the
  /// artifact's (none is loaded or sent), the rest of the job as asked: what a job costs besides
  /// the code, the CPU-time bound's baseline. A worker that ran only such jobs has run no code of
  /// an answer, so it may serve the next job (WorkerPool).
  bool noop = false;
  /// With `parent_snapshots`: the worker reports after every `report_every`-th run and after its
  /// last, and the parent copies the snapshots of all the runs since its previous report. More
  /// than 1 only for a fixed schedule (no time box, warmup_ms or min_timed_ms: the worker knows
  /// its last run) whose rotations give every run of a report's block its own output tensors: a
  /// CPU-time check job (thousands of runs, one exchange per block instead of per run).
  int report_every = 1;
  /// Parent side only (never sent): where a `parent_snapshots` job's copies go, indexed by the
  /// copies' destinations; memory the worker never maps, so code in the worker can neither read
  /// which runs were copied nor rewrite a copy afterwards. Null: destinations are plan tensors.
  std::vector<std::vector<std::byte>>* snapshot_store = nullptr;
  /// Parent side only (never sent), with `snapshot_store`: the outputs of a run that is not
  /// checked are copied here (its size, pages touched before the job, as the store's are), so the
  /// parent's pause after every run is the same copy: a red team timed the pauses between its
  /// calls and read which runs were checked from the longer ones, then skipped the others
  /// (2026-12-07). Null: no decoy copies.
  std::vector<std::byte>* snapshot_decoy = nullptr;
  /// Parent side only (never sent), with `parent_snapshots` and `report_every` 1: the runs
  /// checked are drawn as the worker reports them (env/run_sample.hpp; a schedule whose run count
  /// is not known in advance: warmup_ms, min_timed_ms), into `snapshot_store`, instead of from
  /// `snapshots`.
  RunSample* sample = nullptr;
  /// Sent: the worker itself draws the checked runs as they are made, into this many slots (0:
  /// none), a uniform sample of every run (env/run_sample.hpp, seeded from `rewrite_seed`), and
  /// reports which run each slot holds (RunOutcome::sampled_runs). For a worker that runs no host
  /// code of the answer (cuda: device code only), with a schedule whose run count depends on wall
  /// time (warmup_ms, min_timed_ms). Slot s's copy of output `worker_sample_outputs[j]` goes to
  /// plan tensor `worker_sample_first + s * worker_sample_outputs.size() + j`.
  int worker_sample_slots = 0;
  int worker_sample_first = -1;
  std::vector<int> worker_sample_outputs;
  /// Parent side only (never sent), with `parent_snapshots` and `report_every` 1: the job's time
  /// limit (and its idle stop and wall-clock backstop) counts afresh from each run's start, as if
  /// every run were a job of its own: a correctness job of several seeds, where a pooled limit
  /// let a first call that never returns hold the grader for every seed's time (a red team).
  bool timeout_per_run = false;
  /// True when the worker reports its runs to the parent as it makes them and waits for its "go"
  /// after each report (parent_snapshots or parent_zeroes_scratch).
  bool reports_runs() const { return parent_snapshots || parent_zeroes_scratch; }
  /// Worker side only (never sent): called after each run, outside the timed region, once the
  /// backend's own copies are made; false stops the job (the parent is gone).
  std::function<bool(int run)> on_run_done;
  /// Warm-up also lasts at least this long, milliseconds of wall time (a GPU's clocks ramp up
  /// over tens of ms); 0: `warmup` runs only.
  double warmup_ms = 0;
  /// Trials go on past `trials` until their times sum to at least this, milliseconds (a 20 us
  /// kernel's 20 trials are 0.4 ms), within the time box and 100 x `trials` runs; 0: `trials`.
  double min_timed_ms = 0;
  /// The job's time limit is the pool's (env.run_timeout_s) times this, 1 to kMaxTimeoutRuns: a
  /// multi-run job makes several runs however slow each is (every input set once and a trial,
  /// even in a spent time box), and each run may take what one correctness run may
  /// (timeout_runs_of). Parent side: the worker ignores it.
  int timeout_runs = 1;
};

/// The most a job's time limit is multiplied by (RunRequest::timeout_runs).
inline constexpr int kMaxTimeoutRuns = 8;

/// The runs `request` makes over `sets` input sets when every run is slower than its time box
/// (or all of its runs, without a box), at most kMaxTimeoutRuns: what RunRequest::timeout_runs
/// should be so that a slow but correct kernel (3.5 s a call against a 10-s limit) is not a
/// `timeout` of the timing job when each of its correctness runs was not.
inline int timeout_runs_of(const RunRequest& request, size_t sets) {
  const int r = static_cast<int>(sets < 1 ? 1 : sets);
  const int warmup = request.warmup < 0 ? 0 : request.warmup;
  const int trials = request.trials < 1 ? 1 : request.trials;
  int runs = warmup + trials;
  if (request.max_seconds > 0) runs = (warmup < r ? warmup : r) + 1;  // warm-up is cut only once every set ran
  if (runs < r) runs = r;
  return runs < kMaxTimeoutRuns ? runs : kMaxTimeoutRuns;
}

/// Result of running a launch sequence in a worker.
struct RunOutcome {
  /// `correct` here means only "ran to completion" (outputs are checked by the verifier);
  /// otherwise launch_error, runtime_error or timeout, or infra_error when the device could not
  /// take the job for a reason not of the code's making (out of device memory while setting it
  /// up, a reference that ran out of memory): the verifier retries such a job once.
  Verdict verdict = Verdict::correct;
  std::string message;          ///< what went wrong, for feedback (empty when it ran)
  int failed_launch = -1;       ///< index of the launch that failed or was running, or -1
  std::vector<double> times_ms; ///< one wall time per timed trial, milliseconds
  std::vector<int> runs;        ///< index of every run made (warm-up included), in order
  /// With RunRequest::profile_launches and more than one launch: each launch's median time over
  /// the warm-up runs (ms, one per launch of the plan, in order); empty otherwise. From a worker,
  /// untrusted: the pool keeps it only when it has one finite, non-negative value per launch.
  std::vector<double> launch_ms;
  /// CPU time the worker process used for this job (all its threads, ms), measured by the parent
  /// from outside (the process's CPU clock, from sending the job to its reply); never read from
  /// the worker's reply. -1 when the job ran in-process or the clock could not be read.
  double job_cpu_ms = -1;
  /// Of job_cpu_ms, what the worker's main thread (the one that makes the calls) used, ms, from
  /// /proc/PID/task/PID/schedstat; the rest ran in other threads. -1 when it could not be read.
  double job_main_cpu_ms = -1;
  /// With RunRequest::worker_sample_slots: the run each slot holds, -1 for a slot never filled.
  std::vector<int> sampled_runs;
  /// With RunRequest::parent_snapshots: the runs the parent counted as the worker reported them
  /// (its copies made), whatever the job's end; a failed job failed in run `runs_counted` (or
  /// after its last). Set by the parent, never read from the worker's reply; -1 otherwise.
  int runs_counted = -1;

  /// True if the sequence ran to completion.
  bool ok() const { return verdict == Verdict::correct; }
};

/// Tag of the constructors that build a backend inside a worker process (make_worker_backend):
/// nothing of the parent's (cache folder, GPU probe, compiler) is set up.
struct WorkerSide {};

/// A compile + execute backend.
class Backend {
 public:
  virtual ~Backend() = default;
  /// "cpu" or "cuda".
  virtual std::string name() const = 0;
  /// The code-block language this backend accepts.
  virtual CodeLanguage language() const = 0;
  /// Launch limits checked by bind_plan.
  virtual LaunchLimits limits() const = 0;
  /// Options for parse_launch_plan (cuda requires grid and block, cpu does not).
  virtual PlanParseOptions plan_options() const = 0;
  /// Compiles `code` for `plan` (which fixes the argument types of every launch). A failure of
  /// the candidate's code is reported in the outcome; a broken toolchain throws leap::Error.
  virtual CompileOutcome compile(const std::string& code, const LaunchPlan& plan) = 0;
  /// Runs inside a worker process: loads `artifact` and runs `plan.launches` in order,
  /// `request.warmup + request.trials` times. `tensors[i]` is the host shared memory of
  /// `plan.tensors[i]`. Stores the index of the running launch in `*current_launch` (if given)
  /// so the parent can name it after a crash or a timeout.
  virtual RunOutcome execute(const Artifact& artifact, const BoundPlan& plan,
                             const std::vector<void*>& tensors, const RunRequest& request,
                             std::atomic<int>* current_launch) = 0;
  /// What a worker process needs to build this backend's execute side (make_worker_backend):
  /// a JSON object with at least {"backend": name()}.
  virtual std::string worker_spec() const { return "{\"backend\": \"" + name() + "\"}"; }
  /// Asked inside a worker after each job's reply is sent: true if the process must exit (its
  /// device state is unusable, e.g. a poisoned CUDA context); the pool then starts a fresh one.
  virtual bool worker_must_exit() const { return false; }
  /// Called in a worker forked from the parent (PoolOptions::Spawn::fork), before its first job:
  /// the child is a copy of a multi-threaded process, and a lock another thread held at the fork
  /// stays held in it forever (glibc's __exit_funcs_lock, taken by dlclose's __cxa_finalize, hung
  /// forked cpu workers in 2 of 3 runs of an infra test). Default: nothing.
  virtual void in_forked_worker() {}
  /// Asked in the parent: true when the pool retires a worker of this backend after every job,
  /// whatever its reply says. A cpu worker keeps the answer's code loaded, and that code can write
  /// the reply (its "exiting" flag included), so only the parent may decide that the process ends:
  /// a worker kept alive would carry the code, and any thread it started, into the next job (a
  /// no-op job the CPU-time bound compares with, or another answer's timing).
  virtual bool worker_serves_one_job() const { return false; }
  /// The verdicts a worker of this backend can reply with. The pool refuses any other
  /// (env/reply_check.hpp): a cpu worker runs the answer's host code in its own process, and that
  /// code can write a reply of its own, so it must never buy an unscored `infra_error` or a
  /// `timeout` (which only the pool decides). Default: correct, launch_error, runtime_error.
  virtual std::vector<Verdict> worker_verdicts() const {
    return {Verdict::correct, Verdict::launch_error, Verdict::runtime_error};
  }
  /// The device a worker of this backend runs and times the reference on ("cuda:0"), or empty
  /// when the verifier times the reference itself on the CPU (the default).
  virtual std::string reference_device() const { return ""; }
  /// Runs inside a worker: runs `reference` on the device, `request.warmup + request.trials`
  /// times over `request.rotations` (its inputs are tensors 0 .. reference.inputs-1 of each
  /// rotation, read from `tensors`, laid out as `plan.tensors`), and returns one time per trial
  /// in milliseconds, measured like a candidate's. Nothing is written back to `tensors`. A
  /// failure is a runtime_error with the reason (infra_error when the device ran out of memory);
  /// either is an infrastructure error of the evaluation. The default says the backend cannot.
  virtual RunOutcome time_reference(const ReferenceProgram& reference, const BoundPlan& plan,
                                    const std::vector<void*>& tensors, const RunRequest& request) {
    (void)reference, (void)plan, (void)tensors, (void)request;
    RunOutcome out;
    out.verdict = Verdict::runtime_error;
    out.message = "internal: the " + name() + " backend does not run references in workers";
    return out;
  }
};

}  // namespace leap::env
