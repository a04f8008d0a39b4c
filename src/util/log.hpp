#pragma once
// Logging setup (spdlog: console on stderr, plus a per-run file) and a progress line for long
// loops. Code logs through spdlog directly (spdlog::info(...)) once init_logging has run.
#include <chrono>
#include <cstdint>
#include <string>

namespace leap::util {

/// Sets up the default logger: colored console sink on stderr at `level`
/// (trace | debug | info | warn | error | off). Throws leap::UsageError for an unknown level.
void init_logging(const std::string& level);

/// Adds a file sink at `path` (parent folders created; appended to), e.g. results/<run-id>/leap.log.
/// Every line is flushed as it is written; a failed write is remembered (see log_file_error).
/// Throws leap::Error when the file cannot be opened.
void add_log_file(const std::string& path);

/// The first write error of the log file `path` added by add_log_file (empty: of any of them),
/// e.g. "PATH: writing the log failed: disk full (...)", or "" when every line was written.
std::string log_file_error(const std::string& path = "");

/// One progress line: "label 12/100 (12.0%) 3.40 it/s, elapsed 0:03, ETA 0:25".
/// `elapsed_s` in seconds; `total` <= 0 means unknown (no percent and no ETA).
std::string format_progress(const std::string& label, int64_t done, int64_t total, double elapsed_s);

/// Logs a progress line at info level at most every `interval_s` seconds, and once at the end.
class Progress {
 public:
  /// `total` items expected (<= 0: unknown); disabled progress logs nothing.
  Progress(std::string label, int64_t total, bool enabled = true, double interval_s = 5.0);
  /// Records `n` more finished items and logs when the interval has passed.
  void tick(int64_t n = 1);
  /// Logs the final line (once).
  void finish();
  /// Finished items so far.
  int64_t done() const { return done_; }

 private:
  std::string label_;
  int64_t total_;
  bool enabled_;
  double interval_s_;
  int64_t done_ = 0;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace leap::util
