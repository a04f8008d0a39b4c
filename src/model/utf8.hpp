#pragma once
// UTF-8 helpers for the tokenizer: Unicode normalisation and lossy decoding.
#include <cstddef>
#include <string>
#include <string_view>

namespace leap::model {

/// Unicode normalisation forms (utf8proc).
enum class NormalForm { NFC, NFD, NFKC, NFKD };

/// Normalises UTF-8 `text`. Invalid UTF-8 is first repaired as by utf8_lossy (one U+FFFD per
/// maximal invalid subpart). Throws leap::ModelError if utf8proc fails (out of memory).
std::string normalize_unicode(std::string_view text, NormalForm form);

/// Bytes -> valid UTF-8, replacing each maximal invalid subpart with U+FFFD, exactly as Rust's
/// String::from_utf8_lossy and Python's bytes.decode("utf-8", "replace") do.
std::string utf8_lossy(std::string_view bytes);

/// Like utf8_lossy, but a trailing incomplete (valid so far) multi-byte sequence is not
/// decoded: its length (0..3 bytes) is stored in *held and it is left out of the result.
std::string utf8_lossy_hold_tail(std::string_view bytes, std::size_t* held);

/// True when `bytes` is entirely valid UTF-8.
bool utf8_valid(std::string_view bytes);

}  // namespace leap::model
