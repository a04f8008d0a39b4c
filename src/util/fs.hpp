#pragma once
// File-system helpers that fail loudly: whole-file writes through a temporary name (flushed,
// size-checked, fsync'ed, then renamed), recursive removal without a shell, and error texts that
// say "disk full" when that is the cause.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace leap::util {

/// Text for an errno from a write: "disk full (No space left on device)" for ENOSPC and EDQUOT,
/// else strerror(err).
std::string io_error_text(int err);

/// Writes `bytes` to `path` whole or not at all: to "<path>.tmp.<pid>.<thread>.<n>" first,
/// every write checked, fsync'ed, its size checked against `bytes`, then renamed over `path` (and
/// the folder fsync'ed). On any failure the temporary file is removed and leap::Error is thrown
/// naming the path and the cause ("disk full" for ENOSPC); an existing `path` is left as it was.
///
/// Test hook: when the environment variable LEAP_TEST_ENOSPC holds the file name of `path`
/// (e.g. "optimizer.pt"), the write fails half-way as if the disk were full (errno ENOSPC).
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

/// Copies `from` to `to` through write_file_atomic (same guarantees and errors).
void copy_file_atomic(const std::filesystem::path& from, const std::filesystem::path& to);

/// Size of the file at `path` in bytes, or -1 when it cannot be stat'ed.
std::int64_t file_size_or(const std::filesystem::path& path);

/// Deletes `path` and everything below it (symbolic links are removed, never followed), without
/// a shell; a missing path is no error. Returns false if something could not be removed.
/// (std::filesystem::remove_all is avoided: libtorch.so exports its own, which crashes in leap.)
bool remove_tree(const std::filesystem::path& path);

/// Throws UsageError "<what> <out> exists and is not empty; give a new folder (nothing was
/// written)" (or "... is not a folder") unless `out` is missing or an empty folder. `what` names
/// the command and option, e.g. "leap tasks generate: --out".
void require_new_folder(const std::filesystem::path& out, const std::string& what);

/// Writes the new folder `out` whole or not at all: every (path relative to `out`, bytes) of
/// `files` through write_file_atomic into the hidden sibling ".<name>.tmp.<pid>", which is then
/// renamed to `out` (an empty `out` is replaced). Checks require_new_folder first (nothing is
/// written then). Throws leap::Error naming `out` when a write or the rename fails; the temporary
/// folder is removed and `out` is left as it was.
void write_new_folder(const std::filesystem::path& out,
                      const std::vector<std::pair<std::string, std::string>>& files, const std::string& what);

/// fsync of a folder, so that a rename inside it is durable. Errors are ignored (not every file
/// system supports it).
void sync_dir(const std::filesystem::path& dir);

}  // namespace leap::util
