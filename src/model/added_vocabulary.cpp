#include "model/added_vocabulary.hpp"

#include <utf8proc.h>

#include <algorithm>

namespace leap::model {

namespace {

// Decodes the code point starting at s[i] (s is valid UTF-8); returns its length.
std::size_t cp_at(std::string_view s, std::size_t i, utf8proc_int32_t* cp) {
  auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                            static_cast<utf8proc_ssize_t>(s.size() - i), cp);
  return n > 0 ? static_cast<std::size_t>(n) : 1;
}

// Start of the code point ending at s[i-1].
std::size_t cp_before(std::string_view s, std::size_t i) {
  std::size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  return j;
}

bool is_white_space(utf8proc_int32_t c) {  // Unicode White_Space (Rust char::is_whitespace)
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

bool is_word_char(utf8proc_int32_t c) {
  if (c == '_') return true;
  auto cat = utf8proc_category(c);
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens,
                                     const std::vector<std::string>& match_text) {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (!match_text[i].empty()) entries_.push_back({match_text[i], &tokens[i]});
  std::stable_sort(entries_.begin(), entries_.end(),
                   [](const Entry& a, const Entry& b) { return a.text.size() > b.text.size(); });
  for (std::size_t i = 0; i < entries_.size(); ++i)
    by_first_[static_cast<unsigned char>(entries_[i].text[0])].push_back(i);
}

std::vector<Segment> AddedTokenMatcher::split(std::string_view text, bool split_special) const {
  std::vector<Segment> out;
  if (entries_.empty()) {
    if (!text.empty()) out.push_back({std::string(text), -1});
    return out;
  }
  std::size_t plain_start = 0;  // start of pending plain text
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto it = by_first_.find(static_cast<unsigned char>(text[pos]));
    const Entry* hit = nullptr;
    if (it != by_first_.end())
      for (std::size_t idx : it->second) {
        const Entry& e = entries_[idx];
        if (text.compare(pos, e.text.size(), e.text) == 0) {
          hit = &e;
          break;  // longest first
        }
      }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    std::size_t start = pos, stop = pos + hit->text.size();
    const AddedToken& tok = *hit->token;
    if (tok.special && !split_special) {
      pos = stop;
      continue;
    }
    if (tok.single_word) {
      utf8proc_int32_t c = 0;
      bool ok = true;
      if (start > 0) {
        cp_at(text, cp_before(text, start), &c);
        if (is_word_char(c)) ok = false;
      }
      if (stop < text.size()) {
        cp_at(text, stop, &c);
        if (is_word_char(c)) ok = false;
      }
      if (!ok) {
        pos = stop;
        continue;
      }
    }
    if (tok.lstrip) {
      while (start > plain_start) {
        std::size_t b = cp_before(text, start);
        utf8proc_int32_t c = 0;
        cp_at(text, b, &c);
        if (!is_white_space(c)) break;
        start = b;
      }
    }
    if (tok.rstrip) {
      while (stop < text.size()) {
        utf8proc_int32_t c = 0;
        std::size_t n = cp_at(text, stop, &c);
        if (!is_white_space(c)) break;
        stop += n;
      }
    }
    if (start > plain_start) out.push_back({std::string(text.substr(plain_start, start - plain_start)), -1});
    out.push_back({std::string(text.substr(start, stop - start)), tok.id});
    pos = plain_start = stop;
  }
  if (plain_start < text.size()) out.push_back({std::string(text.substr(plain_start)), -1});
  return out;
}

}  // namespace leap::model
