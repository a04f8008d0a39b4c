#pragma once
// GPT-2's byte <-> printable-unicode map used by byte-level BPE vocabularies.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace leap::model {

/// UTF-8 spelling of the printable character GPT-2 assigns to each byte ("Ġ" for ' ', ...).
const std::array<std::string, 256>& byte_to_unicode();

/// The byte a GPT-2 byte-level character stands for, or nullopt if `cp` is not one of the 256.
std::optional<uint8_t> unicode_to_byte(char32_t cp);

/// Maps raw bytes to their byte-level string (each byte -> one character).
std::string byte_level_encode(std::string_view bytes);

/// Decodes one token as the HF ByteLevel decoder does: if every character of `token` is a
/// byte-level character the result is those bytes, otherwise `token`'s own UTF-8 bytes.
std::string byte_level_decode_token(std::string_view token);

}  // namespace leap::model
