#pragma once
// The on-disk compile cache shared by the backends (cpu: host compiler, cuda: NVRTC). An entry
// is a few files in the cache folder, named by the entry's key:
//   <key><binary_ext>   the compiled module (".so", ".cubin"), written first;
//   <key>.exports       its entry points, one per line, written last: marks the entry complete;
//   <key>.fail          the compiler's log of a compile that failed (a failure is cached too).
// Every file is written whole through a temporary name unique per process, thread and call
// (util::write_file_atomic), so concurrent compiles of one key, in one process or several, never
// see or leave a half-written entry. The key is the SHA-256 of everything that decides the
// output (source, flags, compiler version): a collision would serve another answer's binary.
#include <array>
#include <filesystem>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

namespace leap::env {

/// One backend's compile cache in a folder (see the file comment for the layout).
class CompileCache {
 public:
  /// What a lookup found.
  struct Entry {
    enum class State { missing, compiled, failed } state = State::missing;
    std::string binary_path;        ///< the module, when compiled
    std::set<std::string> exports;  ///< its entry points, when compiled
    std::string log;                ///< the compiler's log, when failed
  };

  /// A cache in `dir` (created if missing; throws leap::Error naming it when it cannot be) whose
  /// modules end in `binary_ext` (".so", ".cubin"), holding at most `max_bytes` of modules and
  /// failure logs (0: no bound): a store that takes the folder past it removes the least recently written modules
  /// until it holds three quarters of it (an RL run compiles every answer; a red team filled the
  /// disk at 200 MB an answer, 2026-12-06).
  CompileCache(std::string dir, std::string binary_ext, uint64_t max_bytes = kDefaultMaxBytes);

  /// The default bound on a cache folder's modules: 4 GiB.
  static constexpr uint64_t kDefaultMaxBytes = uint64_t(4) << 30;

  /// The key of a compile: SHA-256 (hex, 64 digits) of `text`, which must hold everything the
  /// output depends on.
  static std::string key_of(std::string_view text);

  /// The entry of `key`, as the files on disk say now.
  Entry find(const std::string& key) const;
  /// Stores a compiled module and its entry points; returns the module's path. Throws
  /// leap::Error (disk full, ...) leaving no entry.
  std::string store_compiled(const std::string& key, std::string_view binary, const std::set<std::string>& exports) const;
  /// Stores the log of a failed compile.
  void store_failed(const std::string& key, std::string_view log) const;

  /// Serialises the compiles of one key in this process (striped locks): a second identical
  /// answer waits for the first compile and then finds its entry instead of compiling again.
  std::unique_lock<std::mutex> lock(const std::string& key);

  /// The cache folder.
  const std::string& dir() const { return dir_; }

 private:
  /// Removes the least recently written modules (and their .exports) and failure logs but
  /// `keep`'s until the folder's take at most three quarters of max_bytes_. Caller holds size_mutex_.
  void evict(const std::string& keep) const;
  /// Adds `bytes` just stored under `key` to the count (read from the folder the first time) and
  /// evicts past max_bytes_.
  void account(uint64_t bytes, const std::string& key) const;
  /// Whether a file of the folder counts against max_bytes_: a module or a failure's log.
  bool counted(const std::filesystem::path& p) const;

  std::string dir_;
  std::string binary_ext_;
  uint64_t max_bytes_ = 0;
  mutable std::mutex size_mutex_;
  mutable int64_t bytes_ = -1;  ///< the folder's module bytes as this process counts them; -1: not yet read
  std::array<std::mutex, 64> stripes_;
};

}  // namespace leap::env
