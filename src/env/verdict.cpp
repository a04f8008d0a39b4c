#include "env/verdict.hpp"

#include <array>

#include "util/error.hpp"

namespace leap::env {

namespace {
constexpr std::array<std::string_view, 9> kNames = {
    "format_error", "compile_error", "launch_error",    "runtime_error", "timeout",
    "wrong_output", "inputs_modified", "correct",       "infra_error"};
}

std::string_view to_string(Verdict v) { return kNames.at(static_cast<size_t>(v)); }

Verdict verdict_from_string(std::string_view text) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (kNames[i] == text) return static_cast<Verdict>(i);
  std::string all;
  for (auto n : kNames) all += (all.empty() ? "" : ", ") + std::string(n);
  throw Error("unknown verdict '" + std::string(text) + "' (expected one of: " + all + ")");
}

std::string bound_text(std::string text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  // The note's own length depends on the count; 64 characters always suffice.
  size_t keep = max_chars > 64 ? max_chars - 64 : 0;
  size_t dropped = text.size() - keep;
  text.resize(keep);
  std::string note = "\n[... " + std::to_string(dropped) + " more characters cut]";
  text += note;
  if (text.size() > max_chars) text.resize(max_chars);
  return text;
}

EvalResult EvalResult::make(Verdict v, std::string feedback, size_t max_chars) {
  EvalResult r;
  r.verdict = v;
  r.feedback = bound_text(std::move(feedback), max_chars);
  return r;
}

}  // namespace leap::env
