#include "model/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace leap::model {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr uint64_t kMaxHeader = 100ull * 1000 * 1000;

[[noreturn]] void fail(const fs::path& p, const std::string& msg) {
  throw ModelError(p.string() + ": " + msg);
}

[[noreturn]] void fail_tensor(const fs::path& p, const std::string& name, const std::string& msg) {
  throw ModelError(p.string() + ": tensor \"" + name + "\": " + msg);
}

uint64_t read_u64_le(const std::byte* b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint64_t>(b[i]);
  return v;
}

uint64_t json_u64(const json& j, const fs::path& p, const std::string& name, const char* what) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
  fail_tensor(p, name, std::string(what) + " must be a non-negative integer, got " + j.dump());
}

}  // namespace

int64_t TensorView::numel() const noexcept {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  SafetensorsFile f;
  f.file_ = MappedFile::open(path);
  const std::size_t size = f.file_->size();
  const std::byte* base = f.file_->data();
  if (size < 8)
    fail(path, "not a safetensors file: " + std::to_string(size) +
                   " bytes, too short for the 8-byte header length (truncated?)");
  const uint64_t hlen = read_u64_le(base);
  if (hlen > kMaxHeader)
    fail(path, "header length " + std::to_string(hlen) + " is over the 100 MB limit (corrupt file?)");
  if (hlen > size - 8)
    fail(path, "header length " + std::to_string(hlen) + " runs past the end of the " +
                   std::to_string(size) + "-byte file (truncated?)");
  const char* hbeg = reinterpret_cast<const char*>(base + 8);
  json header;
  try {
    header = json::parse(hbeg, hbeg + hlen);
  } catch (const json::parse_error& e) {
    fail(path, std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) fail(path, "header is not a JSON object");

  const std::byte* data = base + 8 + hlen;
  const uint64_t data_size = size - 8 - hlen;
  struct Span {
    uint64_t begin, end;
    std::size_t idx;
  };
  std::vector<Span> spans;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) fail(path, "__metadata__ is not a JSON object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string())
          fail(path, "__metadata__ value for \"" + m.key() + "\" is not a string");
        f.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) fail_tensor(path, name, "entry is not a JSON object");
    for (const char* key : {"dtype", "shape", "data_offsets"})
      if (!v.contains(key)) fail_tensor(path, name, std::string("missing \"") + key + "\"");
    if (!v["dtype"].is_string()) fail_tensor(path, name, "dtype is not a string");
    TensorView t;
    t.name = name;
    t.dtype = parse_dtype(v["dtype"].get<std::string>(), path.string() + ": tensor \"" + name + "\"");
    if (!v["shape"].is_array()) fail_tensor(path, name, "shape is not an array");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : v["shape"]) {
      uint64_t dim = json_u64(d, path, name, "shape entry");
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      t.shape.push_back(static_cast<int64_t>(dim));
      if (dim != 0 && numel > std::numeric_limits<uint64_t>::max() / dim) overflow = true;
      numel *= dim;
    }
    const uint64_t esz = dtype_size(t.dtype);
    if (overflow || (numel != 0 && numel > std::numeric_limits<uint64_t>::max() / esz))
      fail_tensor(path, name, "shape " + v["shape"].dump() + " overflows");
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2)
      fail_tensor(path, name, "data_offsets must be [begin, end], got " + off.dump());
    uint64_t b = json_u64(off[0], path, name, "data_offsets entry");
    uint64_t e = json_u64(off[1], path, name, "data_offsets entry");
    if (b > e) fail_tensor(path, name, "data_offsets " + off.dump() + " has begin > end");
    if (e > data_size)
      fail_tensor(path, name,
                  "data_offsets " + off.dump() + " run past the end of the data buffer (" +
                      std::to_string(data_size) + " bytes; file truncated or corrupt)");
    if (e - b != numel * esz)
      fail_tensor(path, name,
                  "data_offsets " + off.dump() + " span " + std::to_string(e - b) +
                      " bytes but shape " + v["shape"].dump() + " of " +
                      std::string(dtype_name(t.dtype)) + " needs " + std::to_string(numel * esz));
    t.data = e > b ? static_cast<const void*>(data + b) : nullptr;
    t.nbytes = static_cast<std::size_t>(e - b);
    t.owner = f.file_;
    spans.push_back({b, e, f.tensors_.size()});
    f.tensors_.push_back(std::move(t));
  }
  // Overlap check on non-empty tensors, sorted by start.
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  const Span* prev = nullptr;
  for (const Span& s : spans) {
    if (s.begin == s.end) continue;
    if (prev != nullptr && s.begin < prev->end)
      fail(path, "tensors \"" + f.tensors_[prev->idx].name + "\" and \"" + f.tensors_[s.idx].name +
                     "\" overlap (corrupt header)");
    if (prev == nullptr || s.end > prev->end) prev = &s;
  }
  std::sort(f.tensors_.begin(), f.tensors_.end(),
            [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  return f;
}

const TensorView* SafetensorsFile::find(std::string_view name) const noexcept {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const TensorView& t, std::string_view n) { return t.name < n; });
  if (it != tensors_.end() && it->name == name) return &*it;
  return nullptr;
}

const TensorView& SafetensorsFile::at(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  throw ModelError(path().string() + ": no tensor \"" + std::string(name) + "\"");
}

// ---- sharded checkpoint -----------------------------------------------------------------

SafetensorsCheckpoint SafetensorsCheckpoint::open(const fs::path& path) {
  SafetensorsCheckpoint c;
  c.source_ = path;
  fs::path index_path, single_path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(path / "model.safetensors.index.json"))
      index_path = path / "model.safetensors.index.json";
    else if (fs::exists(path / "model.safetensors"))
      single_path = path / "model.safetensors";
    else
      throw ModelError(path.string() +
                       ": no model.safetensors.index.json or model.safetensors in this folder");
  } else if (path.string().ends_with(".index.json")) {
    index_path = path;
  } else {
    single_path = path;
  }

  if (!single_path.empty()) {
    c.files_.push_back(SafetensorsFile::open(single_path));
    c.metadata_ = c.files_[0].metadata();
    for (std::size_t i = 0; i < c.files_[0].tensors().size(); ++i)
      c.index_.emplace(c.files_[0].tensors()[i].name, std::make_pair(std::size_t{0}, i));
    return c;
  }

  json idx;
  {
    auto mf = MappedFile::open(index_path);
    const char* b = reinterpret_cast<const char*>(mf->data());
    try {
      idx = json::parse(b, b + mf->size());
    } catch (const json::parse_error& e) {
      throw ModelError(index_path.string() + ": not valid JSON: " + e.what());
    }
  }
  if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
    throw ModelError(index_path.string() + ": missing \"weight_map\" object");
  if (idx.contains("metadata") && idx["metadata"].is_object())
    for (auto m = idx["metadata"].begin(); m != idx["metadata"].end(); ++m)
      c.metadata_[m.key()] = m.value().is_string() ? m.value().get<std::string>() : m.value().dump();

  const fs::path dir = index_path.parent_path();
  std::map<std::string, std::size_t> shard_ids;
  for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      throw ModelError(index_path.string() + ": weight_map entry for \"" + it.key() +
                       "\" is not a file name");
    const std::string shard = it.value().get<std::string>();
    if (shard.find('/') != std::string::npos || shard == "..")
      throw ModelError(index_path.string() + ": shard name \"" + shard + "\" must be a plain file name");
    auto [sit, inserted] = shard_ids.emplace(shard, c.files_.size());
    if (inserted) {
      if (!fs::exists(dir / shard))
        throw ModelError(index_path.string() + ": shard \"" + shard + "\" (for tensor \"" + it.key() +
                         "\") does not exist in " + dir.string());
      c.files_.push_back(SafetensorsFile::open(dir / shard));
    }
    const SafetensorsFile& f = c.files_[sit->second];
    const TensorView* t = f.find(it.key());
    if (t == nullptr)
      throw ModelError(index_path.string() + ": tensor \"" + it.key() + "\" is mapped to " + shard +
                       " but that file has no such tensor");
    c.index_.emplace(it.key(), std::make_pair(sit->second, static_cast<std::size_t>(t - f.tensors().data())));
  }
  // Tensors present in a shard but not in the index, or in two shards, are errors.
  for (const auto& f : c.files_)
    for (const auto& t : f.tensors()) {
      auto it = c.index_.find(t.name);
      if (it == c.index_.end())
        throw ModelError(f.path().string() + ": tensor \"" + t.name + "\" is not listed in " +
                         index_path.string());
      if (&c.files_[it->second.first] != &f)
        throw ModelError(f.path().string() + ": tensor \"" + t.name + "\" is also in " +
                         c.files_[it->second.first].path().string());
    }
  return c;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [n, _] : index_) out.push_back(n);
  return out;
}

const TensorView* SafetensorsCheckpoint::find(std::string_view name) const noexcept {
  auto it = index_.find(name);
  if (it == index_.end()) return nullptr;
  return &files_[it->second.first].tensors()[it->second.second];
}

const TensorView& SafetensorsCheckpoint::at(std::string_view name) const {
  if (const TensorView* t = find(name)) return *t;
  throw ModelError(source_.string() + ": no tensor \"" + std::string(name) + "\" in the checkpoint");
}

}  // namespace leap::model
