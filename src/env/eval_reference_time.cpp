// The reference's times (env/evaluation.hpp): in a worker on the GPU (cuda backend with a
// device), else here on the CPU; both on the one schedule (env/timing_schedule.hpp), TF32 off for
// fp32, on the same rotated input sets as the candidate; the timed region is the reference's call
// alone (its inputs are cloned before it, untimed).
#include <chrono>
#include <mutex>

#include "env/evaluation.hpp"
#include "env/reference.hpp"
#include "env/timing_schedule.hpp"

namespace leap::env {

std::optional<std::string> Evaluation::time_reference(Timed& out) {
  const int R = o_.timing_sets;
  BoundPlan rplan = bound_;
  const std::vector<std::vector<int>> rotations = add_rotated_sets(rplan, n_in_, R);
  RunRequest rreq = timing_request(o_, rotations);
  rreq.timeout_runs = timeout_runs_of(rreq, static_cast<size_t>(R));
  const std::string gpu_reference = v_.backend_->reference_device();
  if (!gpu_reference.empty()) {
    rreq.reference = ReferenceProgram{task_.spec().reference.torchscript, task_.spec().reference.file, task_.spec().file,
                                      static_cast<int>(n_in_)};
    SharedBuffers rbuf(rplan.tensors);
    for (int r = 0; r < R; ++r)
      for (size_t i = 0; i < n_in_; ++i)
        write_tensor(rbuf, static_cast<size_t>(rotations[static_cast<size_t>(r)][i]), set_inputs_[static_cast<size_t>(r)][i]);
    const RunOutcome run = retry_once_on_infra(  // (inside the caller's timing window)
        [&](int) { return v_.pool_->run(comp_.artifact, rplan, rbuf, rreq); }, infra_retries_);
    if (run.ok() && !run.times_ms.empty()) {
      out.ms = median(run.times_ms);
      out.n = static_cast<int>(run.times_ms.size());
      reference_device_ = gpu_reference;
      return std::nullopt;
    }
    // The reference ran on the CPU already (correctness), so this is the environment's fault; a
    // CPU time would make the speedup GPU candidate over CPU reference: no speedup at all.
    return "the reference could not be timed on " + gpu_reference + ": " +
           (run.ok() ? std::string("no trials ran") : run_failure_text(run)) +
           (run.verdict == Verdict::infra_error ? " (twice)" : "");
  }
  reference_device_ = "cpu";
  ThreadGuard threads(o_.threads);  // (inside the timing window: no other reference runs now)
  using Clock = std::chrono::steady_clock;
  RunOutcome run;
  RunHooks hooks;
  // As on the GPU (cuda_reference.cpp): fresh clones of the inputs before each run, untimed (the
  // reference may write to its arguments), and only the call timed. Timing the clones too once
  // paid an honest copy of column 0 of a [4096, 4096] input 377x (the reference took 0.04 ms,
  // its clones 35 ms) and inflated memory-bound tasks 1.5-3x (a tester, 2026-12-07).
  torch::NoGradGuard no_grad;
  std::vector<c10::IValue> args;
  std::vector<torch::Tensor> outs;  // freed in the next prepare, untimed
  hooks.prepare_outside_box = true;  // the clones are not the reference's time, nor its box's
  hooks.prepare = [&](int, size_t set) {
    outs.clear();
    args.clear();
    for (const auto& x : set_inputs_[set]) args.emplace_back(x.clone());
    return true;
  };
  hooks.timed = [&](int, size_t) -> double {
    const auto t0 = Clock::now();
    outs = task_.reference().call(args);  // a copy of the handles: the clones are freed in prepare, untimed
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  run_timing_schedule(rreq, static_cast<size_t>(R), hooks, run);
  out.ms = median(run.times_ms);
  out.n = static_cast<int>(run.times_ms.size());
  return std::nullopt;
}

}  // namespace leap::env
