#pragma once
// Error types shared by every layer. Each carries the exit code `leap` returns for it.
#include <stdexcept>
#include <string>

namespace leap {

/// Base of every error leap reports to the user. `exit_code()` is the process exit status
/// the CLI returns for it (1 unless a subclass says otherwise).
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what, int exit_code = 1)
      : std::runtime_error(what), exit_code_(exit_code) {}
  /// Process exit status for this error.
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

/// Bad user input in a config file or a `--set` override: the message names the file (or
/// the override), the key path and line:column. Exit code 2.
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& what) : Error(what, 2) {}
};

/// Bad command-line usage (unknown flag, missing argument). Exit code 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what, 2) {}
};

/// A feature whose work belongs to a later issue. Exit code 3, so scripts can tell it
/// apart from a failure of work that exists.
class NotBuiltError : public Error {
 public:
  explicit NotBuiltError(const std::string& what) : Error(what, 3) {}
};

/// SQLite store failure (open, migrate, write, query): the message names the database file.
class StoreError : public Error {
 public:
  /// `exit_code` 2 when the file given is not a leap store (bad input), 1 for a failure of a store.
  explicit StoreError(const std::string& what, int exit_code = 1) : Error(what, exit_code) {}
};

/// A model checkpoint that cannot be loaded: a bad or truncated safetensors file, a bad
/// config.json / tokenizer.json, a missing file. The message names the file (and the tensor or
/// key where there is one). Exit code 1.
class ModelError : public Error {
 public:
  explicit ModelError(const std::string& what) : Error(what, 1) {}
};

}  // namespace leap
