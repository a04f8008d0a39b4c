#pragma once
// The verdict cascade of one evaluated solution and the result the next turn is shown.
#include <cstddef>
#include <limits>
#include <map>
#include <string>
#include <string_view>

namespace leap::env {

/// Outcome of evaluating a solution, in cascade order: the first stage that fails decides.
/// `infra_error` is outside the cascade: the evaluation itself could not be carried out.
enum class Verdict {
  format_error,     ///< answer blocks or launch plan malformed
  compile_error,    ///< the code block did not compile (or the compiler timed out)
  launch_error,     ///< unknown kernel, bad launch dims, too much shared memory / scratch
  runtime_error,    ///< crash (signal), illegal address, exception in the worker
  timeout,          ///< the launch sequence ran past the wall-clock limit
  wrong_output,     ///< outputs differ from the reference beyond tolerance
  inputs_modified,  ///< the candidate wrote to an input tensor
  correct,          ///< outputs match; timing fields are filled
  /// The environment failed, not the answer (the reference could not run on the GPU, the device
  /// ran out of memory twice): stored and counted (`leap report` infra_errors), never scored:
  /// no reward is earned or lost, no metric counts it as the answer's failure.
  infra_error,
};

/// Lowercase name, exactly as in DESIGN.md (`format_error`, ..., `correct`).
std::string_view to_string(Verdict v);

/// Inverse of `to_string`; throws leap::Error naming the bad text and the valid names.
Verdict verdict_from_string(std::string_view text);

/// Cuts `text` to at most `max_chars` characters (including the note), appending a note with the
/// number of characters dropped; unchanged if it already fits.
std::string bound_text(std::string text, size_t max_chars);

/// Default bound on feedback text shown to the model, in characters.
inline constexpr size_t kDefaultFeedbackChars = 4000;

/// What one evaluation returns: the verdict, the feedback for the next turn, and timings.
struct EvalResult {
  Verdict verdict = Verdict::format_error;
  std::string feedback;  ///< shown to the model; bounded by `bound_text`
  double candidate_ms = std::numeric_limits<double>::quiet_NaN();  ///< median candidate time, ms
  double reference_ms = std::numeric_limits<double>::quiet_NaN();  ///< median reference time, ms
  double speedup = std::numeric_limits<double>::quiet_NaN();       ///< reference_ms / candidate_ms
  bool suspicious = false;  ///< speedup above timing.suspicious_speedup: re-measured, flagged
  std::map<std::string, std::string> details;  ///< machine-readable extras (e.g. max_abs_error)

  /// Builds a result with `feedback` bounded to `max_chars`.
  static EvalResult make(Verdict v, std::string feedback,
                         size_t max_chars = kDefaultFeedbackChars);
  bool is_correct() const { return verdict == Verdict::correct; }
  /// True for Verdict::infra_error (an evaluation that says nothing about the answer).
  bool is_infra_error() const { return verdict == Verdict::infra_error; }
};

}  // namespace leap::env
