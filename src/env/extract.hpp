#pragma once
// Finding the code block and the launch-plan block in a model's free-text answer.
#include <string>
#include <string_view>

namespace leap::env {

/// Longest answer extract_answer accepts, in bytes (checked before anything else).
inline constexpr size_t kMaxAnswerBytes = 1024 * 1024;
/// Largest code block extract_answer accepts, in bytes.
inline constexpr size_t kMaxCodeBytes = 256 * 1024;

/// Language of a solution's code block; it decides the backend (cuda -> NVRTC, cpp -> host compiler).
enum class CodeLanguage { cuda, cpp };

/// `cuda` or `cpp`.
std::string_view to_string(CodeLanguage lang);

/// The two blocks of an answer, with where they start in the answer text.
struct ExtractedAnswer {
  CodeLanguage language = CodeLanguage::cpp;
  std::string code;       ///< body of the last ```cuda / ```cpp block (no fences)
  int code_line = 0;      ///< 1-based answer line of the code body's first line
  std::string plan_yaml;  ///< body of the last ```yaml block
  int plan_line = 0;      ///< 1-based answer line of the launch plan's first line
};

/// Extracts the answer blocks from `response`.
///
/// Reasoning is skipped: a response that begins with `<think>` counts from its first `</think>`
/// (none: FormatError, the answer was cut off); one that does not (a chat template that opened the
/// block in the prompt) counts from the first `</think>` outside a fenced block, if any. The tags
/// anywhere else are text. HTML comments outside fenced blocks are hidden, as a rendered answer
/// hides them (a block inside one is not graded). Fences are lines of three or more backticks or
/// tildes after any indentation (a list item's); the info string's first word is the tag (`cuda`/`cu`, `cpp`/`c++`/`cxx`,
/// `yaml`/`yml`, case-insensitive); a block closes at a line of at least as many of the same
/// character, and its lines lose up to the opening fence's indentation.
/// The last code block (cuda or cpp) and the last yaml block win. Throws FormatError for: no
/// code block, no yaml block, an unclosed code/yaml fence, an empty block, or a last code block
/// whose language is not `expected`, and for an answer longer than kMaxAnswerBytes or a code block
/// larger than kMaxCodeBytes (naming the limit). The launch plan's limits are parse_launch_plan's.
ExtractedAnswer extract_answer(std::string_view response, CodeLanguage expected);

/// Reads an answer file (bytes, no decoding), at most kMaxAnswerBytes + 1 of them: a longer file
/// comes back one byte over the limit, so extract_answer refuses it by name without the whole file
/// (hundreds of megabytes, say) being read first. Throws std::runtime_error naming the path when
/// the file cannot be opened or read.
std::string read_answer_file(const std::string& path);

}  // namespace leap::env
