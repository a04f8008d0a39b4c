#include "util/log.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <memory>
#include <mutex>
#include <vector>

#include "util/error.hpp"
#include "util/fs.hpp"

namespace leap::util {

namespace {

// A log file that is flushed after every line (a crash loses nothing already logged) and that
// remembers its first write error instead of dropping it.
class CheckedFileSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit CheckedFileSink(const std::string& path) : path_(path) {
    file_ = std::fopen(path.c_str(), "ab");
    if (!file_) throw Error(fmt::format("{}: cannot open the log file: {}", path, io_error_text(errno)));
  }
  ~CheckedFileSink() override {
    if (file_) std::fclose(file_);
  }
  std::string error() {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  const std::string& path() const { return path_; }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!error_.empty()) return;
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    errno = 0;
    if (std::fwrite(buf.data(), 1, buf.size(), file_) != buf.size() || std::fflush(file_) != 0)
      error_ = fmt::format("{}: writing the log failed: {}", path_, io_error_text(errno ? errno : EIO));
  }
  void flush_() override {
    if (error_.empty() && std::fflush(file_) != 0)
      error_ = fmt::format("{}: writing the log failed: {}", path_, io_error_text(errno ? errno : EIO));
  }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  std::string error_;
};

std::mutex g_files_mutex;
std::vector<std::weak_ptr<CheckedFileSink>> g_files;

}  // namespace

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
  auto sink = std::make_shared<CheckedFileSink>(path);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
  spdlog::default_logger()->sinks().push_back(sink);
  std::lock_guard<std::mutex> lock(g_files_mutex);
  g_files.push_back(sink);
}

std::string log_file_error(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_files_mutex);
  for (const auto& w : g_files)
    if (auto s = w.lock())
      if (path.empty() || s->path() == path)
        if (auto e = s->error(); !e.empty()) return e;
  return "";
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
