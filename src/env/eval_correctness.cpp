// Step 4 of an evaluation: correctness on several seeds, candidate first, then the reference;
// and the output / input check every later timed run is held to as well (env/evaluation.hpp).
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <sstream>

#include "env/evaluation.hpp"
#include "env/poison.hpp"
#include "env/reference.hpp"
#include "env/reference_cache.hpp"

namespace leap::env {

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
  s << "]): " << c.mismatches << " of " << c.numel << " elements differ beyond tolerance"
    << " (|out - ref| <= " << fmt_num(c.atol_eff) << " + " << fmt_num(tol.rtol) << " * |ref|)\n";
  s << "max abs error: " << fmt_num(c.max_abs_error) << " at index " << index_text(c.max_index, bt.shape) << "\n";
  s << "first bad index: " << index_text(c.first_bad, bt.shape) << ": expected " << fmt_num(c.first_expected)
    << ", got " << fmt_num(c.first_got);
  // The pre-fill's exact bits (a NaN the code computed, such as 0/0 or inf/inf, is not blamed on
  // an element left unwritten).
  const torch::Tensor flat = got.contiguous().reshape({-1});
  const bool prefill = c.first_bad >= 0 && c.first_bad < flat.numel() &&
                       is_poison(static_cast<const char*>(flat.data_ptr()) + c.first_bad * flat.element_size(), bt.dtype);
  if (std::isnan(c.first_got) && !std::isnan(c.first_expected))
    s << (prefill ? " (NaN: outputs are pre-filled with NaN, so this element was probably never written)"
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
  for (size_t i = 0; check_inputs && i < n_in_; ++i) {
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

std::optional<EvalResult> Evaluation::check_correctness() {
  std::vector<int> identity(bound_.tensors.size());
  for (size_t i = 0; i < identity.size(); ++i) identity[i] = static_cast<int>(i);
  for (int s = 0; s < o_.seeds; ++s) {
    // The seed's inputs and the reference's outputs on them are shared by every answer to this task.
    const uint64_t seed = input_seed(task_, o_.seed, s);
    const std::string key = ReferenceCache::key(task_, seed, o_.threads);
    const auto entry = v_.reference_cache_->inputs(key, [&] { return make_inputs(task_, seed, s); });
    const std::vector<torch::Tensor>& inputs = entry->inputs;
    SharedBuffers buf(bound_.tensors);
    for (size_t i = 0; i < n_in_; ++i) write_tensor(buf, i, inputs[i]);
    for (size_t j = 0; j < n_out_; ++j) prefill_output(buf, n_in_ + j, bound_.tensors[n_in_ + j]);
    const RunOutcome run = retry_once_on_infra(
        [&](int attempt) {
          if (attempt)  // once more, from poisoned outputs again
            for (size_t j = 0; j < n_out_; ++j) prefill_output(buf, n_in_ + j, bound_.tensors[n_in_ + j]);
          std::shared_lock<DeviceLock> shared(v_.device_lock_);  // correctness runs share the device
          return v_.pool_->run(comp_.artifact, bound_, buf, RunRequest{});  // defaults: no warm-up, one run
        },
        infra_retries_);
    const std::string when = "on seed " + std::to_string(s + 1) + " of " + std::to_string(o_.seeds) +
                             " (inputs: " + inputs_text(task_, s) + ")";
    if (run.verdict == Verdict::infra_error) return infra(run.message + " (twice) [" + when + "]");
    if (!run.ok()) return fail(run.verdict, run_failure_text(run) + " [" + when + "]");
    std::vector<torch::Tensor> refs = v_.reference_cache_->outputs(key, entry, [&](const auto& in) { return reference(in); });
    if (s == 0)
      for (size_t j = 0; j < n_out_; ++j) declared_rms_[j] = finite_rms(refs[j]);
    if (auto bad = check_outputs(buf, identity, inputs, refs, when)) {
      bad->details["seed"] = std::to_string(s);
      return bad;
    }
  }
  return std::nullopt;
}

EvalResult Evaluation::correct_untimed() const {
  EvalResult ok = EvalResult::make(Verdict::correct, "", o_.feedback_max_chars);
  ok.feedback = bound_text("correct on " + std::to_string(o_.seeds) + " seeds (not timed)", o_.feedback_max_chars);
  return ok;
}

}  // namespace leap::env
