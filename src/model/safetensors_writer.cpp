#include "model/safetensors_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace leap::model {

namespace fs = std::filesystem;

void write_safetensors(const fs::path& path, const std::map<std::string, TensorBytes>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  using Item = std::pair<const std::string, TensorBytes>;
  std::vector<const Item*> order;
  for (const auto& kv : tensors) {
    const auto& [name, t] = kv;
    if (name.empty() || name == "__metadata__")
      throw ModelError(path.string() + ": invalid tensor name \"" + name + "\"");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0)
        throw ModelError(path.string() + ": tensor \"" + name + "\": negative dimension " +
                         std::to_string(d));
      numel *= static_cast<uint64_t>(d);
    }
    if (t.bytes.size() != numel * dtype_size(t.dtype))
      throw ModelError(path.string() + ": tensor \"" + name + "\": " +
                       std::to_string(t.bytes.size()) + " bytes given but shape needs " +
                       std::to_string(numel * dtype_size(t.dtype)));
    order.push_back(&kv);
  }
  std::stable_sort(order.begin(), order.end(), [](const Item* a, const Item* b) {
    return dtype_size(a->second.dtype) > dtype_size(b->second.dtype);
  });

  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t offset = 0;
  for (const Item* it : order) {
    const TensorBytes& t = it->second;
    header[it->first] = {{"dtype", std::string(dtype_name(t.dtype))},
                         {"shape", t.shape},
                         {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');

  fs::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ModelError(path.string() + ": cannot create " + tmp.string() + ": " + std::strerror(errno));
    unsigned char len[8];
    uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((n >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(len), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const Item* it : order)
      out.write(reinterpret_cast<const char*>(it->second.bytes.data()),
                static_cast<std::streamsize>(it->second.bytes.size()));
    out.flush();
    if (!out) {
      ::unlink(tmp.c_str());
      throw ModelError(path.string() + ": write failed (disk full?)");
    }
  }
  // POSIX rename: libtorch.so exports its own std::filesystem symbols, so avoid them here.
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    throw ModelError(path.string() + ": cannot rename " + tmp.string() + ": " + std::strerror(e));
  }
}

}  // namespace leap::model
