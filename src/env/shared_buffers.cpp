#include "env/shared_buffers.hpp"

#include <fcntl.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

SharedBuffers::SharedBuffers(const std::vector<BoundTensor>& tensors) {
  std::vector<size_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.bytes());
  layout_ = BufferLayout::make(sizes);
  fd_ = memfd_create("leap-tensors", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd_ < 0) throw Error(std::string("memfd_create: ") + std::strerror(errno));
  if (ftruncate(fd_, static_cast<off_t>(layout_.total_bytes)) != 0) {
    int e = errno;
    release();
    throw Error("cannot size shared tensor memory to " + std::to_string(layout_.total_bytes) +
                " bytes: " + std::strerror(e));
  }
  // Sealed at its size: a worker (running untrusted code) cannot shrink it under the parent's
  // mapping (the parent would die of SIGBUS reading the outputs), nor grow it.
  if (fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    int e = errno;
    release();
    throw Error(std::string("cannot seal shared tensor memory: ") + std::strerror(e));
  }
  void* p = mmap(nullptr, layout_.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    int e = errno;
    release();
    throw Error(std::string("mmap of shared tensor memory: ") + std::strerror(e));
  }
  base_ = static_cast<std::byte*>(p);
  // Workers forked later must not inherit this mapping (they map the fds they are sent), so
  // one candidate cannot write into the buffers of a job running concurrently.
  madvise(p, layout_.total_bytes, MADV_DONTFORK);
}

SharedBuffers::~SharedBuffers() { release(); }

SharedBuffers::SharedBuffers(SharedBuffers&& o) noexcept
    : layout_(std::move(o.layout_)), fd_(o.fd_), base_(o.base_) {
  o.fd_ = -1;
  o.base_ = nullptr;
}

SharedBuffers& SharedBuffers::operator=(SharedBuffers&& o) noexcept {
  if (this != &o) {
    release();
    layout_ = std::move(o.layout_);
    fd_ = o.fd_;
    base_ = o.base_;
    o.fd_ = -1;
    o.base_ = nullptr;
  }
  return *this;
}

void SharedBuffers::release() {
  if (base_) munmap(base_, layout_.total_bytes);
  if (fd_ >= 0) close(fd_);
  base_ = nullptr;
  fd_ = -1;
}

void* SharedBuffers::data(size_t i) const { return base_ + layout_.offsets.at(i); }

void SharedBuffers::zero(size_t i) { std::memset(data(i), 0, bytes(i)); }

}  // namespace leap::env
