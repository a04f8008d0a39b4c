#include "env/verdict.hpp"

#include <algorithm>
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
  // A text bounded before carries its note: taken off and counted in, so the new note says how
  // much of the original text is missing (not the old note's characters).
  size_t earlier = 0;
  static const std::string kOpen = "\n[... ", kClose = " more characters cut]";
  if (text.size() > kOpen.size() + kClose.size() && text.compare(text.size() - kClose.size(), kClose.size(), kClose) == 0)
    if (const size_t at = text.rfind(kOpen); at != std::string::npos) {
      const std::string digits = text.substr(at + kOpen.size(), text.size() - kClose.size() - at - kOpen.size());
      if (!digits.empty() && digits.size() < 19 && digits.find_first_not_of("0123456789") == std::string::npos) {
        earlier = std::stoull(digits);
        text.resize(at);
      }
    }
  // The note's own length depends on the count; 64 characters always suffice.
  size_t keep = std::min(text.size(), max_chars > 64 ? max_chars - 64 : 0);
  while (keep > 0 && keep < text.size() && (static_cast<unsigned char>(text[keep]) & 0xC0) == 0x80) --keep;  // whole UTF-8 characters
  const size_t dropped = text.size() - keep + earlier;
  text.resize(keep);
  text += kOpen + std::to_string(dropped) + kClose;
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
