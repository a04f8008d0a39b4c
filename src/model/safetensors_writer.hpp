#pragma once
// Writer for .safetensors files, readable by the Python `safetensors` package (torch-free).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "model/dtype.hpp"

namespace leap::model {

/// One tensor to write. `bytes` is borrowed: it must stay valid during write_safetensors.
struct TensorBytes {
  DType dtype = DType::F32;          ///< Element type.
  std::vector<int64_t> shape;        ///< Dimensions (empty for a scalar).
  std::span<const std::byte> bytes;  ///< Row-major little-endian data, numel * dtype_size bytes.
};

/// Writes `tensors` (name -> data) and optional `metadata` ("__metadata__", string -> string) to
/// `path` as HF does: 8-byte little-endian header length, JSON header padded with spaces to a
/// multiple of 8 bytes, then the data sorted by dtype size (largest first) then name, so every
/// tensor is aligned to its element size. Written to "<path>.tmp" then renamed, so a crash
/// never leaves a half file under `path`.
/// Throws leap::ModelError naming the file (and tensor) when a byte count != numel * dtype size,
/// a dimension is negative, a name is empty or "__metadata__", or the file cannot be written.
void write_safetensors(const std::filesystem::path& path,
                       const std::map<std::string, TensorBytes>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace leap::model
