#pragma once
// The text the policy sees: the turn-1 instruction (system message, task, answer format with one
// worked example), the feedback message of later turns, and the compact records that replace
// earlier turns. docs/prompts.md shows every template.
#include <string>
#include <string_view>
#include <vector>

#include "model/chat_format.hpp"
#include "tasks/task_spec.hpp"

namespace leap::rl {

/// System message for `backend` ("cpu" or "cuda"): the role, the answer format and its rules.
std::string system_prompt(std::string_view backend);

/// The task's interface for `backend`: size values, inputs and outputs with dtype and shape,
/// constants. One line per item, e.g. "input x: float32 [B, N]".
std::string interface_text(const tasks::TaskSpec& task, std::string_view backend);

/// The user message of turn 1: the task's PyTorch reference (its `prompt`), its interface and a
/// worked example of a complete answer for `backend`.
std::string task_message(const tasks::TaskSpec& task, std::string_view backend);

/// Turn 1's messages: [system, user(task_message)].
std::vector<model::ChatMessage> first_turn_messages(const tasks::TaskSpec& task, std::string_view backend);

/// The user message that follows an attempt: the verdict name, the environment's feedback, and
/// (for a correct attempt with refine_after_success) a request to make it faster.
std::string feedback_message(std::string_view verdict, std::string_view feedback, double speedup);

/// The context of the turn after an attempt: `context` (the prompt the attempt answered), then
/// the attempt as the assistant's message (reasoning removed, strip_think), then the user's
/// feedback_message(verdict, feedback, speedup). The rollout engine builds every later turn's
/// context with it, and the SFT warm start its second-turn examples (train.sft.second_turn), so
/// both are the same text. Pure; throws nothing beyond std::bad_alloc.
std::vector<model::ChatMessage> next_turn_context(std::vector<model::ChatMessage> context, std::string_view answer,
                                                  std::string_view verdict, std::string_view feedback, double speedup);

/// `text` with every `<think>...</think>` span removed (an unclosed `<think>` drops the rest).
/// Reasoning is never carried into later contexts (DESIGN.md section 4, compaction).
std::string strip_think(std::string_view text);

/// One line of a digest: "attempt 2: wrong_output (max abs error 0.5 ...)" from a verdict and
/// the first line of its feedback, at most ~160 characters.
std::string digest_line(int turn, std::string_view verdict, std::string_view feedback);

/// The request appended to a context when the policy is asked to summarise its attempts
/// (compaction strategy `summary`).
std::string summary_request();

}  // namespace leap::rl
