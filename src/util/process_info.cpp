#include "util/process_info.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace leap::util {

namespace {

// Boot time (Unix seconds) from the btime line of /proc/stat.
std::optional<double> boot_time() {
  std::ifstream in("/proc/stat");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
  return std::nullopt;
}

}  // namespace

std::optional<double> process_start_time(long pid) {
  if (pid <= 0) return std::nullopt;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // The command name (field 2) is in parentheses and may hold spaces: count fields after the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i) {
    if (!(rest >> field)) return std::nullopt;
    if (i == 3 && field == "Z") return std::nullopt;  // a zombie has ended
  }
  const auto boot = boot_time();
  const long ticks = sysconf(_SC_CLK_TCK);
  if (!boot || ticks <= 0) return std::nullopt;
  return *boot + std::stod(field) / static_cast<double>(ticks);
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

}  // namespace leap::util
