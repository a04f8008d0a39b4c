#pragma once
// Chat prompt formats (ChatML for Qwen, Llama-3 headers) rendered to text with special tokens.
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer.hpp"

namespace leap::model {

/// A prompt layout. Auto is only an input to resolve_chat_format.
enum class ChatFormat { Auto, ChatML, Llama3 };

/// One chat turn. `role` is "system", "user", "assistant" (or any role the model knows).
struct ChatMessage {
  std::string role;
  std::string content;
  bool operator==(const ChatMessage&) const = default;
};

/// Parses "auto", "chatml" or "llama3" (case-sensitive). Throws leap::ModelError listing them
/// otherwise.
ChatFormat parse_chat_format(std::string_view name);
/// "auto", "chatml" or "llama3".
std::string_view chat_format_name(ChatFormat f) noexcept;

/// Picks the format for a checkpoint: `requested` unless Auto; else Llama3 when the tokenizer
/// has <|start_header_id|>, <|end_header_id|> and <|eot_id|> (preferred for model_type
/// "llama"), ChatML when it has <|im_start|> and <|im_end|>. Throws leap::ModelError naming
/// `model_type` when the requested format's tokens are missing or nothing matches.
ChatFormat resolve_chat_format(ChatFormat requested, std::string_view model_type, const Tokenizer& tok);

/// Renders `messages` (plain text with the special tokens' literal text, to be encoded with
/// split_special_tokens on).
/// ChatML: "<|im_start|>{role}\n{content}<|im_end|>\n" per message; the generation prompt is
/// "<|im_start|>assistant\n". `default_system` (the checkpoint template's, chat_template.hpp) is
/// rendered as a first system message when the conversation does not start with one (both formats).
/// Llama3: "<|begin_of_text|>" then "<|start_header_id|>{role}<|end_header_id|>\n\n{trimmed
/// content}<|eot_id|>" per message; the generation prompt is
/// "<|start_header_id|>assistant<|end_header_id|>\n\n". Content is whitespace-trimmed as the
/// Llama-3 template does; no date/tools system preamble is added.
/// Throws leap::ModelError for Auto.
std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, std::string_view default_system = {});

/// `text` with every literal of `tok`'s special added tokens ("<|im_start|>", "<|im_end|>", ...)
/// broken by a zero-width space (U+200B) after its first byte, so that a chat rendered around it
/// and encoded with special-token matching on reads it as plain text: what the environment or an
/// earlier answer writes into a prompt (feedback, compiler logs, exception texts) can never become
/// a turn marker of the policy's next prompt (issue "Environment V"). With `all_added`, the
/// literals of added tokens not marked special too (Qwen2.5's "<tool_call>", Qwen3's "</think>":
/// the encoder matches them as well), for text that is not the policy's own. Text without such
/// literals is returned unchanged.
std::string escape_special_tokens(const Tokenizer& tok, std::string_view text, bool all_added = false);

/// Token ids that end an assistant turn: ChatML <|im_end|> (and <|endoftext|> if present);
/// Llama3 <|eot_id|> (and <|end_of_text|> if present). Throws leap::ModelError if the main
/// one is missing from the tokenizer, or for Auto.
std::vector<TokenId> chat_stop_ids(ChatFormat format, const Tokenizer& tok);

}  // namespace leap::model
