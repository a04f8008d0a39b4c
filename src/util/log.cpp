#include "util/log.hpp"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fmt/format.h>

#include "util/error.hpp"

namespace leap::util {

void init_logging(const std::string& level) {
  auto lvl = spdlog::level::from_str(level);
  if (lvl == spdlog::level::off && level != "off")
    throw UsageError("--log-level: unknown level '" + level + "' (trace, debug, info, warn, error, off)");
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_pattern("[%H:%M:%S] [%^%l%$] %v");
  auto logger = std::make_shared<spdlog::logger>("leap", console);
  logger->set_level(lvl);
  spdlog::set_default_logger(logger);
}

void add_log_file(const std::string& path) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  try {
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, false);
    sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    spdlog::default_logger()->sinks().push_back(sink);
  } catch (const spdlog::spdlog_ex& e) {
    throw Error(fmt::format("{}: cannot open the log file: {}", path, e.what()));
  }
}

namespace {
std::string clock_text(double s) {
  if (s < 0) s = 0;
  auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}
}  // namespace

std::string format_progress(const std::string& label, int64_t done, int64_t total, double elapsed_s) {
  double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  std::string out = label + " " + std::to_string(done);
  if (total > 0) out += fmt::format("/{} ({:.1f}%)", total, 100.0 * static_cast<double>(done) / static_cast<double>(total));
  out += fmt::format(" {:.2f} it/s, elapsed {}", rate, clock_text(elapsed_s));
  if (total > 0 && rate > 0 && done < total)
    out += ", ETA " + clock_text(static_cast<double>(total - done) / rate);
  return out;
}

Progress::Progress(std::string label, int64_t total, bool enabled, double interval_s)
    : label_(std::move(label)), total_(total), enabled_(enabled), interval_s_(interval_s),
      start_(std::chrono::steady_clock::now()), last_(start_) {}

void Progress::tick(int64_t n) {
  done_ += n;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_).count() >= interval_s_) {
    last_ = now;
    spdlog::info("{}", format_progress(label_, done_, total_, std::chrono::duration<double>(now - start_).count()));
  }
}

void Progress::finish() {
  if (finished_ || !enabled_) return;
  finished_ = true;
  auto now = std::chrono::steady_clock::now();
  spdlog::info("{}", format_progress(label_, done_, total_, std::chrono::duration<double>(now - start_).count()));
}

}  // namespace leap::util
