#include "env/compile_cache.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "util/error.hpp"
#include "util/fs.hpp"
#include "util/hash.hpp"
#include "util/sha256.hpp"

namespace leap::env {

namespace fs = std::filesystem;

namespace {

std::string read_whole(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

CompileCache::CompileCache(std::string dir, std::string binary_ext, uint64_t max_bytes)
    : dir_(std::move(dir)), binary_ext_(std::move(binary_ext)), max_bytes_(max_bytes) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw Error("cannot create the compile cache " + dir_ + ": " + ec.message());
}

std::string CompileCache::key_of(std::string_view text) { return util::sha256_hex(text); }

CompileCache::Entry CompileCache::find(const std::string& key) const {
  Entry e;
  const fs::path dir(dir_);
  const fs::path binary = dir / (key + binary_ext_);
  const fs::path exports = dir / (key + ".exports");
  std::error_code ec;
  if (fs::exists(binary, ec) && fs::exists(exports, ec)) {
    e.state = Entry::State::compiled;
    e.binary_path = binary.string();
    fs::last_write_time(binary, fs::file_time_type::clock::now(), ec);  // used: the last a bound evicts
    std::istringstream in(read_whole(exports));
    for (std::string name; in >> name;) e.exports.insert(name);
    return e;
  }
  const fs::path fail = dir / (key + ".fail");
  if (fs::exists(fail, ec)) {
    e.state = Entry::State::failed;
    e.log = read_whole(fail);
  }
  return e;
}

std::string CompileCache::store_compiled(const std::string& key, std::string_view binary,
                                         const std::set<std::string>& exports) const {
  const fs::path dir(dir_);
  const fs::path path = dir / (key + binary_ext_);
  std::string names;
  for (const auto& n : exports) names += n + "\n";
  // The module before the .exports file, which marks the entry complete. Written by this process
  // (mode 0644, leap's user), never renamed from a sandboxed compiler's output.
  util::write_file_atomic(path, binary);
  util::write_file_atomic(dir / (key + ".exports"), names);
  account(binary.size(), key);
  return path.string();
}

bool CompileCache::counted(const fs::path& p) const {
  const std::string ext = p.extension().string();
  return ext == binary_ext_ || ext == ".fail";
}

void CompileCache::account(uint64_t bytes, const std::string& key) const {
  if (max_bytes_ == 0) return;
  std::lock_guard<std::mutex> guard(size_mutex_);
  if (bytes_ < 0) {  // first store of this process: what the folder holds (this entry included)
    bytes_ = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(dir_), ec))
      if (counted(e.path()) && e.is_regular_file(ec)) bytes_ += static_cast<int64_t>(e.file_size(ec));
  } else {
    bytes_ += static_cast<int64_t>(bytes);
  }
  if (static_cast<uint64_t>(bytes_) > max_bytes_) evict(key);
}

void CompileCache::evict(const std::string& keep) const {
  struct Module {
    fs::file_time_type written;
    fs::path path;
    uint64_t bytes;
  };
  std::vector<Module> modules;
  std::error_code ec;
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(fs::path(dir_), ec)) {
    if (!counted(e.path()) || !e.is_regular_file(ec)) continue;
    const uint64_t bytes = e.file_size(ec);
    total += bytes;
    if (e.path().stem() != keep) modules.push_back({e.last_write_time(ec), e.path(), bytes});
  }
  std::sort(modules.begin(), modules.end(), [](const Module& a, const Module& b) { return a.written < b.written; });
  const uint64_t target = max_bytes_ / 4 * 3;
  for (const Module& m : modules) {
    if (total <= target) break;
    fs::path exports = m.path;
    exports.replace_extension(".exports");
    fs::remove(exports, ec);  // the entry is incomplete from here: a lookup compiles it again
    if (fs::remove(m.path, ec)) total -= m.bytes;
  }
  bytes_ = static_cast<int64_t>(total);
}

void CompileCache::store_failed(const std::string& key, std::string_view log) const {
  util::write_file_atomic(fs::path(dir_) / (key + ".fail"), log);
  account(log.size(), key);  // a failure's log counts too (a red team left 1-MiB logs)
}

std::unique_lock<std::mutex> CompileCache::lock(const std::string& key) {
  return std::unique_lock<std::mutex>(stripes_[util::fnv1a64(key) % stripes_.size()]);
}

}  // namespace leap::env
