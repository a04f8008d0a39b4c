#pragma once
// A whole file mapped into memory, read-only for callers.
#include <cstddef>
#include <filesystem>
#include <memory>

namespace leap::model {

/// A file mapped privately (copy-on-write) into memory for its lifetime. Callers treat the bytes
/// as read-only; a write through a zero-copy tensor would only change this process's copy.
/// Not copyable; share it through std::shared_ptr (see `open`).
class MappedFile {
 public:
  /// Maps `path`. Throws leap::ModelError naming the file when it cannot be opened, stat-ed or
  /// mapped. An empty file maps to size() == 0 and data() == nullptr.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& path);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// First byte of the mapping (nullptr for an empty file).
  const std::byte* data() const noexcept { return data_; }
  /// Size of the file in bytes.
  std::size_t size() const noexcept { return size_; }
  /// The path the file was opened from.
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  MappedFile() = default;
  std::filesystem::path path_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace leap::model
