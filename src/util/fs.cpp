#include "util/fs.hpp"

#include <thread>

#include <atomic>

#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "util/error.hpp"

namespace leap::util {

namespace fs = std::filesystem;

std::string io_error_text(int err) {
  if (err == ENOSPC || err == EDQUOT) return std::string("disk full (") + std::strerror(err) + ")";
  return std::strerror(err);
}

namespace {

bool inject_enospc(const fs::path& path) {
  const char* name = std::getenv("LEAP_TEST_ENOSPC");
  return name && *name && path.filename().string() == name;
}

[[noreturn]] void fail(const fs::path& path, const std::string& what, int err) {
  throw Error(path.string() + ": " + what + ": " + io_error_text(err));
}

}  // namespace

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  // Unique per process, thread and call: two writers of one path (two grading threads caching the
  // same compiled answer) never share a temporary file; the rename makes one of them win whole.
  static std::atomic<uint64_t> counter{0};
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid()) + "." +
                       std::to_string(std::hash<std::thread::id>{}(std::this_thread::get_id())) + "." +
                       std::to_string(counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot create " + tmp.filename().string(), errno);
  auto abandon = [&](const std::string& what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, what, err);
  };
  const bool fault = inject_enospc(path);
  size_t done = 0;
  while (done < bytes.size()) {
    size_t chunk = std::min<size_t>(bytes.size() - done, size_t{1} << 24);
    if (fault && done + chunk > bytes.size() / 2) {
      if (done < bytes.size() / 2) {  // write the first half, then fail like a full disk
        ssize_t n = ::write(fd, bytes.data() + done, bytes.size() / 2 - done);
        if (n > 0) done += static_cast<size_t>(n);
      }
      abandon("write failed after " + std::to_string(done) + " of " + std::to_string(bytes.size()) + " bytes",
              ENOSPC);
    }
    ssize_t n = ::write(fd, bytes.data() + done, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("write failed after " + std::to_string(done) + " of " + std::to_string(bytes.size()) + " bytes",
              errno);
    }
    if (n == 0) abandon("write made no progress", ENOSPC);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) abandon("fsync failed", errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) abandon("stat failed", errno);
  if (static_cast<uint64_t>(st.st_size) != bytes.size())
    abandon("size check failed: " + std::to_string(st.st_size) + " bytes on disk, " +
                std::to_string(bytes.size()) + " written",
            EIO);
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(path, "close failed", err);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail(path, "cannot rename " + tmp.filename().string() + " to " + path.filename().string(), err);
  }
  sync_dir(path.has_parent_path() ? path.parent_path() : fs::path("."));
}

void copy_file_atomic(const fs::path& from, const fs::path& to) {
  int fd = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(from, "cannot open", errno);
  std::string data;
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int err = errno;
      ::close(fd);
      fail(from, "read failed", err);
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  write_file_atomic(to, data);
}

std::int64_t file_size_or(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<std::int64_t>(st.st_size);
}

namespace {
thread_local bool g_remove_ok = true;
}

bool remove_tree(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return errno == ENOENT;
  g_remove_ok = true;
  int rc = nftw(
      path.c_str(),
      [](const char* p, const struct stat*, int, struct FTW*) {
        if (::remove(p) != 0 && errno != ENOENT) g_remove_ok = false;
        return 0;  // keep going past a failure
      },
      16, FTW_DEPTH | FTW_PHYS);
  return rc == 0 && g_remove_ok;
}

void sync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void require_new_folder(const fs::path& out, const std::string& what) {
  std::error_code ec;
  if (!fs::exists(out, ec)) return;
  if (!fs::is_directory(out, ec)) throw UsageError(what + " " + out.string() + " exists and is not a folder");
  if (!fs::is_empty(out, ec))
    throw UsageError(what + " " + out.string() + " exists and is not empty; give a new folder (nothing was written)");
}

void write_new_folder(const fs::path& out, const std::vector<std::pair<std::string, std::string>>& files,
                      const std::string& what) {
  require_new_folder(out, what);
  fs::path abs = fs::absolute(out).lexically_normal();
  if (abs.filename().empty()) abs = abs.parent_path();  // "DIR/" names DIR
  const fs::path parent = abs.parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error(what + " " + out.string() + ": cannot create " + parent.string() + ": " + ec.message());
  const fs::path tmp = parent / ("." + abs.filename().string() + ".tmp." + std::to_string(::getpid()));
  remove_tree(tmp);
  try {
    fs::create_directories(tmp);
    for (const auto& [rel, bytes] : files) {
      const fs::path f = tmp / rel;
      fs::create_directories(f.parent_path());
      write_file_atomic(f, bytes);
    }
    if (fs::exists(abs)) fs::remove(abs);  // the empty folder checked above
    fs::rename(tmp, abs);
    sync_dir(parent);
  } catch (const fs::filesystem_error& e) {
    remove_tree(tmp);
    throw Error(what + " " + out.string() + ": writing failed: " + e.what());
  } catch (...) {
    remove_tree(tmp);
    throw;
  }
}

}  // namespace leap::util
