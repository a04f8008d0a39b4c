#pragma once
// Reader for .safetensors files (single and sharded), torch-free: it exposes raw views into the
// memory-mapped files. See safetensors_torch.hpp to turn a view into a torch::Tensor.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/dtype.hpp"
#include "model/mapped_file.hpp"

namespace leap::model {

/// One tensor inside a mapped safetensors file. `data` points into the mapping and stays valid
/// while `owner` (or the file/checkpoint it came from) is alive. Treat the bytes as read-only.
struct TensorView {
  std::string name;              ///< Tensor name as stored in the header.
  DType dtype = DType::F32;      ///< Element type.
  std::vector<int64_t> shape;    ///< Dimensions (empty for a scalar).
  const void* data = nullptr;    ///< First byte of the tensor (may be unaligned; may be nullptr if nbytes==0).
  std::size_t nbytes = 0;        ///< Size in bytes == numel() * dtype_size(dtype).
  std::shared_ptr<const MappedFile> owner;  ///< Keeps the mapping alive.

  /// Number of elements (product of shape; 1 for a scalar).
  int64_t numel() const noexcept;
};

/// One memory-mapped .safetensors file with a fully validated header.
/// Cheap to copy (the mapping is shared).
class SafetensorsFile {
 public:
  /// Maps and validates `path`: 8-byte little-endian header length within the file and <= 100 MB,
  /// header is a JSON object, every tensor has a known dtype, a non-negative shape and
  /// data_offsets inside the data buffer whose length equals numel * dtype size, and no two
  /// tensors overlap. "__metadata__" (string -> string) is allowed.
  /// Throws leap::ModelError naming the file (and the tensor) on any violation.
  static SafetensorsFile open(const std::filesystem::path& path);

  /// The file's path.
  const std::filesystem::path& path() const noexcept { return file_->path(); }
  /// The "__metadata__" entries (empty if none).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  /// All tensors, sorted by name.
  const std::vector<TensorView>& tensors() const noexcept { return tensors_; }
  /// The tensor called `name`, or nullptr.
  const TensorView* find(std::string_view name) const noexcept;
  /// The tensor called `name`. Throws leap::ModelError naming the file and tensor if absent.
  const TensorView& at(std::string_view name) const;
  /// The underlying mapping.
  const std::shared_ptr<const MappedFile>& mapping() const noexcept { return file_; }

 private:
  std::shared_ptr<const MappedFile> file_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorView> tensors_;
};

/// The weights of a checkpoint folder: either the shards listed by model.safetensors.index.json
/// or a single model.safetensors.
class SafetensorsCheckpoint {
 public:
  /// Opens a checkpoint folder (index.json preferred, else model.safetensors) or a single
  /// .safetensors / .index.json file path. Every shard is validated (SafetensorsFile::open), every
  /// tensor named by the index must be in its shard, and a tensor present in two shards is an
  /// error. Throws leap::ModelError naming the file and the tensor.
  static SafetensorsCheckpoint open(const std::filesystem::path& path);

  /// All tensor names, sorted.
  std::vector<std::string> names() const;
  /// Number of tensors.
  std::size_t size() const noexcept { return index_.size(); }
  /// The tensor called `name`, or nullptr.
  const TensorView* find(std::string_view name) const noexcept;
  /// The tensor called `name`. Throws leap::ModelError naming the checkpoint and tensor if absent.
  const TensorView& at(std::string_view name) const;
  /// The opened shard files (one for an unsharded checkpoint).
  const std::vector<SafetensorsFile>& files() const noexcept { return files_; }
  /// The "metadata" object of index.json as strings (numbers are printed), or the single file's
  /// __metadata__.
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  /// What was opened (folder or file), for messages.
  const std::filesystem::path& source() const noexcept { return source_; }

 private:
  std::filesystem::path source_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::pair<std::size_t, std::size_t>, std::less<>> index_;  ///< name -> (file, tensor)
  std::map<std::string, std::string> metadata_;
};

}  // namespace leap::model
