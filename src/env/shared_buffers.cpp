#include "env/shared_buffers.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "util/error.hpp"

namespace leap::env {

BufferLayout BufferLayout::make(const std::vector<size_t>& tensor_bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  BufferLayout l;
  size_t cursor = page;  // a guard page first: catches writes before tensor 0
  l.guards.emplace_back(0, page);
  for (size_t b : tensor_bytes) {
    size_t pages = (b + page - 1) / page;
    size_t end = cursor + pages * page;
    size_t off = (end - b) & ~size_t(63);
    if (off < cursor) off = cursor;  // cannot happen for page >= 64; kept for clarity
    l.offsets.push_back(off);
    l.bytes.push_back(b);
    l.guards.emplace_back(end, page);
    cursor = end + page;
  }
  l.total_bytes = cursor;
  return l;
}

bool process_exited(pid_t pid) {
#ifdef SYS_pidfd_open
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) return errno == ESRCH;  // gone (reaped); any other error: cannot tell
  // Readable once the thread group has exited: its leader a zombie and no other thread left.
  pollfd p{fd, POLLIN, 0};
  const int n = poll(&p, 1, 0);
  close(fd);
  return n == 1 && (p.revents & POLLIN);
#else
  (void)pid;
  return false;
#endif
}

namespace {

/// Memory kept for reuse: sizes up to kMaxKeptBuffer, kMaxKeptBytes in all.
constexpr size_t kMaxKeptBuffer = size_t(64) << 20;
constexpr size_t kMaxKeptBytes = size_t(256) << 20;
constexpr size_t kMinClass = size_t(64) << 10;

/// The size class of a mapping of `bytes`: the next power of two (at least 64 KiB), so a job's
/// memory fits the memory of jobs of about its size; above kMaxKeptBuffer, the size itself.
size_t class_of(size_t bytes) {
  if (bytes > kMaxKeptBuffer) return bytes;
  size_t c = kMinClass;
  while (c < bytes) c <<= 1;
  return c;
}

struct KeptBuffer {
  int fd = -1;
  std::byte* base = nullptr;
  size_t capacity = 0;
  size_t used = 0;             // bytes from the start that any use mapped (the rest was never written)
  std::vector<pid_t> holders;  // those not yet seen to have exited
};

/// The process's recycled memfds (SharedBuffers): most recently kept first out.
class Recycler {
 public:
  static Recycler& instance() {
    static Recycler* r = new Recycler;  // never destroyed: SharedBuffers may outlive static destructors
    return *r;
  }

  /// A kept buffer of `capacity` bytes whose holders have all exited, or fd -1.
  KeptBuffer take(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (size_t i = kept_.size(); i-- > 0;) {
      KeptBuffer& k = kept_[i];
      if (k.capacity != capacity) continue;
      k.holders.erase(std::remove_if(k.holders.begin(), k.holders.end(), process_exited), k.holders.end());
      if (!k.holders.empty()) continue;
      KeptBuffer out = std::move(k);
      kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(i));
      bytes_ -= out.capacity;
      return out;
    }
    return {};
  }

  /// Keeps `k` (evicting the oldest kept buffers beyond kMaxKeptBytes), or frees it.
  void give(KeptBuffer k) {
    std::vector<KeptBuffer> freed;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (k.capacity <= kMaxKeptBuffer) {
        bytes_ += k.capacity;
        kept_.push_back(std::move(k));
      } else {
        freed.push_back(std::move(k));
      }
      while (bytes_ > kMaxKeptBytes && !kept_.empty()) {
        bytes_ -= kept_.front().capacity;
        freed.push_back(std::move(kept_.front()));
        kept_.erase(kept_.begin());
      }
    }
    for (KeptBuffer& f : freed) free(f);
  }

  static void free(KeptBuffer& k) {
    if (k.base) munmap(k.base, k.capacity);
    if (k.fd >= 0) close(k.fd);
    k.base = nullptr;
    k.fd = -1;
  }

 private:
  std::mutex mutex_;
  std::vector<KeptBuffer> kept_;
  size_t bytes_ = 0;
};

}  // namespace

SharedBuffers::SharedBuffers(const std::vector<BoundTensor>& tensors) {
  std::vector<size_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.bytes());
  layout_ = BufferLayout::make(sizes);
  capacity_ = class_of(layout_.total_bytes);
  used_ = layout_.total_bytes;
  if (KeptBuffer k = Recycler::instance().take(capacity_); k.fd >= 0) {
    fd_ = k.fd;
    base_ = k.base;
    recycled_ = true;
    // As a fresh memfd: nothing of an earlier job, within this job's mapping or beyond it (a
    // larger earlier job of the class; workers map only their job's bytes, but the memfd holds all).
    used_ = std::max(used_, k.used);
    std::memset(base_, 0, used_);
    return;
  }
  fd_ = memfd_create("leap-tensors", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) throw Error(std::string("memfd_create: ") + std::strerror(errno));
  if (ftruncate(fd_, static_cast<off_t>(capacity_)) != 0) {
    int e = errno;
    release();
    throw Error("cannot size shared tensor memory to " + std::to_string(capacity_) +
                " bytes: " + std::strerror(e));
  }
  // Sealed at its size: a worker (running untrusted code) cannot shrink it under the parent's
  // mapping (the parent would die of SIGBUS reading the outputs), nor grow it.
  if (fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    release();
    throw Error(std::string("cannot seal shared tensor memory: ") + std::strerror(e));
  }
  void* p = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    release();
    throw Error(std::string("mmap of shared tensor memory: ") + std::strerror(e));
  }
  base_ = static_cast<std::byte*>(p);
  // Workers forked later must not inherit this mapping (they map the fds they are sent), so
  // one candidate cannot write into the buffers of a job running concurrently.
  madvise(p, capacity_, MADV_DONTFORK);
}

SharedBuffers::~SharedBuffers() { release(); }

SharedBuffers::SharedBuffers(SharedBuffers&& o) noexcept
    : layout_(std::move(o.layout_)),
      fd_(o.fd_),
      base_(o.base_),
      capacity_(o.capacity_),
      used_(o.used_),
      holders_(std::move(o.holders_)),
      recycled_(o.recycled_) {
  o.fd_ = -1;
  o.base_ = nullptr;
}

SharedBuffers& SharedBuffers::operator=(SharedBuffers&& o) noexcept {
  if (this != &o) {
    release();
    layout_ = std::move(o.layout_);
    fd_ = o.fd_;
    base_ = o.base_;
    capacity_ = o.capacity_;
    used_ = o.used_;
    holders_ = std::move(o.holders_);
    recycled_ = o.recycled_;
    o.fd_ = -1;
    o.base_ = nullptr;
  }
  return *this;
}

void SharedBuffers::release() {
  KeptBuffer k;
  k.fd = fd_;
  k.base = base_;
  k.capacity = capacity_;
  k.used = used_;
  k.holders = std::move(holders_);
  base_ = nullptr;
  fd_ = -1;
  holders_.clear();
  if (k.fd >= 0 && k.base) {
    Recycler::instance().give(std::move(k));
  } else {
    Recycler::free(k);
  }
}

void SharedBuffers::sent_to(pid_t pid) {
  if (std::find(holders_.begin(), holders_.end(), pid) == holders_.end()) holders_.push_back(pid);
}

void* SharedBuffers::data(size_t i) const { return base_ + layout_.offsets.at(i); }

void SharedBuffers::zero(size_t i) { std::memset(data(i), 0, bytes(i)); }

}  // namespace leap::env
