#include "model/byte_level.hpp"

#include <utf8proc.h>

namespace leap::model {

namespace {

std::string encode_cp(char32_t cp) {
  utf8proc_uint8_t buf[4];
  auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  return std::string(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

struct Tables {
  std::array<char32_t, 256> cps{};
  std::array<std::string, 256> strs;
  Tables() {
    // bytes_to_unicode() from GPT-2's encoder.py.
    bool direct[256] = {};
    for (int b = '!'; b <= '~'; ++b) direct[b] = true;
    for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
    for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      cps[b] = direct[b] ? static_cast<char32_t>(b) : next++;
      strs[b] = encode_cp(cps[b]);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::array<std::string, 256>& byte_to_unicode() { return tables().strs; }

std::optional<uint8_t> unicode_to_byte(char32_t cp) {
  if (cp < 256) {
    const bool direct = (cp >= '!' && cp <= '~') || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE);
    if (direct) return static_cast<uint8_t>(cp);
    return std::nullopt;
  }
  // Code points 256.. are assigned in byte order to the non-direct bytes.
  const auto& cps = tables().cps;
  if (cp >= 256 + 68) return std::nullopt;
  for (int b = 0; b < 256; ++b)
    if (cps[b] == cp) return static_cast<uint8_t>(b);
  return std::nullopt;
}

std::string byte_level_encode(std::string_view bytes) {
  const auto& t = tables().strs;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t[static_cast<unsigned char>(c)];
  return out;
}

std::string byte_level_decode_token(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  std::size_t i = 0;
  while (i < token.size()) {
    utf8proc_int32_t cp = -1;
    auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(token.data() + i),
                              static_cast<utf8proc_ssize_t>(token.size() - i), &cp);
    if (n <= 0) return std::string(token);
    auto b = unicode_to_byte(static_cast<char32_t>(cp));
    if (!b) return std::string(token);
    out.push_back(static_cast<char>(*b));
    i += static_cast<std::size_t>(n);
  }
  return out;
}

}  // namespace leap::model
