// Steps 1-3 of an evaluation: the answer's format, its compile, the plan bound to the task
// (env/evaluation.hpp; docs/env.md "Verifier").
#include "env/errors.hpp"
#include "env/evaluation.hpp"

namespace leap::env {

Evaluation::Evaluation(Verifier& verifier, const RuntimeTask& task)
    : v_(verifier), task_(task), o_(verifier.options_) {}

EvalResult Evaluation::fail(Verdict v, const std::string& text) const {
  return EvalResult::make(v, text, o_.feedback_max_chars);
}

// An infrastructure error: the evaluation could not be carried out (the reference did not run on
// the GPU, the device was out of memory twice). Stored, counted, never scored (verdict.hpp).
EvalResult Evaluation::infra(const std::string& what) const {
  EvalResult r = fail(Verdict::infra_error,
                      "infrastructure error (not a fault of the answer; this evaluation is not scored): " + what);
  r.details["infra_error"] = what;
  r.details["infra_retries"] = std::to_string(infra_retries_);
  return r;
}

std::optional<EvalResult> Evaluation::parse(std::string_view answer) {
  try {
    ans_ = extract_answer(answer, v_.backend_->language());
    PlanParseOptions po = v_.backend_->plan_options();
    po.line_offset = ans_.plan_line - 1;
    plan_ = parse_launch_plan(ans_.plan_yaml, task_.interface(), po);
  } catch (const FormatError& e) {
    return fail(Verdict::format_error, std::string("format error: ") + e.what());
  }
  return std::nullopt;
}

std::optional<EvalResult> Evaluation::compile() {
  comp_ = v_.backend_->compile(ans_.code, plan_);
  if (comp_.ok) return std::nullopt;
  EvalResult r = fail(Verdict::compile_error, comp_.feedback + "(line numbers count from the first line of the " +
                                                  std::string(to_string(ans_.language)) + " block)");
  r.details["compile_timed_out"] = comp_.timed_out ? "1" : "0";
  return r;
}

std::optional<EvalResult> Evaluation::bind() {
  try {
    bound_ = bind_plan(plan_, task_.interface(), v_.backend_->limits(), &comp_.artifact.exports);
  } catch (const LaunchError& e) {
    return fail(Verdict::launch_error, std::string("launch error: ") + e.what());
  }
  n_in_ = task_.interface().inputs.size();
  n_out_ = task_.interface().outputs.size();
  // The parent's reference runs share the device lock when the device is this CPU (cpu backend).
  reference_on_device_ = v_.backend_->reference_device().empty();
  declared_rms_.assign(n_out_, 0.0);
  return std::nullopt;
}

}  // namespace leap::env
