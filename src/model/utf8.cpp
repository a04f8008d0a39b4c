#include "model/utf8.hpp"

#include <utf8proc.h>

#include <cstdlib>

#include "util/error.hpp"

namespace leap::model {

namespace {

// Length of the valid sequence starting at s[i] (1..4), or 0 if the maximal valid prefix is
// shorter than the sequence needs; *sub gets that prefix length (>= 1) when 0 is returned.
// *truncated says the prefix was cut by the end of input (not by a bad byte).
std::size_t seq_len(std::string_view s, std::size_t i, std::size_t* sub, bool* truncated) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  *truncated = false;
  if (b0 < 0x80) return 1;
  std::size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) need = 2;
  else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *sub = 1;
    return 0;
  }
  std::size_t k = 1;
  for (; k < need; ++k) {
    if (i + k >= s.size()) {
      *sub = k;
      *truncated = true;
      return 0;
    }
    const auto b = static_cast<unsigned char>(s[i + k]);
    const unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *sub = k;
      return 0;
    }
  }
  return need;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

}  // namespace

std::string utf8_lossy_hold_tail(std::string_view s, std::size_t* held) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  if (held) *held = 0;
  while (i < s.size()) {
    std::size_t sub = 0;
    bool truncated = false;
    std::size_t n = seq_len(s, i, &sub, &truncated);
    if (n > 0) {
      out.append(s.substr(i, n));
      i += n;
    } else if (truncated && held != nullptr) {
      *held = s.size() - i;
      break;
    } else {
      out.append(kReplacement);
      i += sub;
    }
  }
  return out;
}

std::string utf8_lossy(std::string_view s) { return utf8_lossy_hold_tail(s, nullptr); }

bool utf8_valid(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t sub = 0;
    bool truncated = false;
    std::size_t n = seq_len(s, i, &sub, &truncated);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string normalize_unicode(std::string_view text, NormalForm form) {
  std::string valid;
  if (!utf8_valid(text)) {
    valid = utf8_lossy(text);
    text = valid;
  }
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::NFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  // Fast path: pure ASCII is invariant under every form.
  bool ascii = true;
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii) return std::string(text);
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                    static_cast<utf8proc_ssize_t>(text.size()), &out,
                                    static_cast<utf8proc_option_t>(options));
  if (n < 0) throw ModelError(std::string("unicode normalisation failed: ") + utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
  std::free(out);
  return result;
}

}  // namespace leap::model
