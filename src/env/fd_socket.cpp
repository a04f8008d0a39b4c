// Unix-socket primitives; see env/fd_socket.hpp.
#include "env/fd_socket.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace leap::env {

namespace {
constexpr size_t kFdLimit = 8;  // control buffer size, in descriptors
}  // namespace

ssize_t send_with_fds(int sock, const void* data, size_t n, const std::vector<int>& fds, size_t max_fds) {
  if (fds.size() > std::min(max_fds, kFdLimit)) {
    errno = EINVAL;
    return -1;
  }
  iovec iov{const_cast<void*>(data), n};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int) * kFdLimit)];
  if (!fds.empty()) {
    std::memset(ctrl, 0, sizeof ctrl);
    msg.msg_control = ctrl;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t w;
  do {
    w = sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (w < 0 && errno == EINTR);
  return w;
}

ssize_t recv_with_fds(int sock, void* data, size_t n, std::vector<int>* fds, size_t max_fds) {
  iovec iov{data, n};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char ctrl[CMSG_SPACE(sizeof(int) * kFdLimit)];
  if (fds) {
    msg.msg_control = ctrl;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * std::min(max_fds, kFdLimit));
  }
  ssize_t r;
  do {
    r = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (r < 0 && errno == EINTR);
  if (r > 0 && fds)
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          fds->push_back(fd);
        }
  return r;
}

Readable wait_readable(int fd, bool timed, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    int ms = -1;
    if (timed) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
      if (left <= 0) return Readable::timeout;
      ms = static_cast<int>(std::min<long long>(left, 1 << 30));
    }
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Readable::error;
    if (r == 0) continue;  // re-check the deadline
    return Readable::yes;
  }
}

}  // namespace leap::env
