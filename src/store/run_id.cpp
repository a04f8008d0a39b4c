#include "store/run_id.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <random>

namespace leap::store {

std::string make_run_id(double unix_seconds, std::uint32_t random) {
  std::time_t t = static_cast<std::time_t>(std::floor(unix_seconds));
  std::tm tm{};
  gmtime_r(&t, &tm);
  // fmt is avoided here: LibTorch's bundled fmt headers shadow the system fmt library.
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d%02d%02d-%02d%02d%02d-%04x", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, random & 0xffffu);
  return buf;
}

std::string make_run_id(double unix_seconds) {
  static thread_local std::mt19937 gen{std::random_device{}()};
  return make_run_id(unix_seconds, static_cast<std::uint32_t>(gen()));
}

bool is_run_id(const std::string& id) {
  if (id.size() != 20 || id[8] != '-' || id[15] != '-') return false;
  for (std::size_t i = 0; i < id.size(); ++i) {
    if (i == 8 || i == 15) continue;
    const auto c = static_cast<unsigned char>(id[i]);
    if (i < 15 ? !std::isdigit(c) : !(std::isdigit(c) || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace leap::store
