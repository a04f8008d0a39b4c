// The job socket's frames (env/job_frame.hpp).
#include "env/job_frame.hpp"

#include <sys/socket.h>

#include <cerrno>

#include "env/fd_socket.hpp"

namespace leap::env {

using Clock = std::chrono::steady_clock;

bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool send_frame(int sock, const std::string& body, const std::vector<int>& attach) {
  uint64_t len = body.size();
  const ssize_t w = send_with_fds(sock, &len, sizeof len, attach, kMaxJobFds);
  if (w < 0) return false;
  if (static_cast<size_t>(w) < sizeof len &&
      !send_all(sock, reinterpret_cast<const char*>(&len) + w, sizeof len - static_cast<size_t>(w)))
    return false;
  return send_all(sock, body.data(), body.size());
}

// Worker side: blocks until the parent's one-byte "go"; false when the socket closed.
bool await_go(int sock) {
  char go = 0;
  ssize_t got;
  do {
    got = recv(sock, &go, 1, MSG_WAITALL);
  } while (got < 0 && errno == EINTR);
  return got == 1;
}

// Waits for readability until `deadline` (none if `timed` is false).
Recv wait_for_frame(int sock, bool timed, Clock::time_point deadline) {
  switch (wait_readable(sock, timed, deadline)) {
    case Readable::yes: return Recv::ok;  // readable, or hung up (recv will return 0)
    case Readable::timeout: return Recv::timeout;
    case Readable::error: break;
  }
  return Recv::error;
}

Recv recv_exact(int sock, char* p, size_t n, bool timed, Clock::time_point deadline, std::vector<int>* fd_out) {
  while (n > 0) {
    Recv w = wait_for_frame(sock, timed, deadline);
    if (w != Recv::ok) return w;
    const ssize_t r = recv_with_fds(sock, p, n, fd_out, kMaxJobFds);
    if (r < 0) return Recv::error;
    if (r == 0) return Recv::eof;
    fd_out = nullptr;  // only the first chunk carries descriptors
    p += r;
    n -= static_cast<size_t>(r);
  }
  return Recv::ok;
}

Recv recv_frame(int sock, std::string& body, bool timed, Clock::time_point deadline, std::vector<int>* fd_out,
                uint64_t max_len) {
  uint64_t len = 0;
  Recv r = recv_exact(sock, reinterpret_cast<char*>(&len), sizeof len, timed, deadline, fd_out);
  if (r != Recv::ok) return r;
  if (len > max_len) return Recv::error;
  body.resize(len);
  return recv_exact(sock, body.data(), len, timed, deadline, nullptr);
}

Recv FrameReader::step(int sock, uint64_t max_len) {
  for (;;) {
    char* p;
    size_t want;
    if (header_got_ < sizeof len_) {
      p = reinterpret_cast<char*>(&len_) + header_got_;
      want = sizeof len_ - header_got_;
    } else {
      if (body_got_ == body_.size()) return Recv::ok;
      p = body_.data() + body_got_;
      want = body_.size() - body_got_;
    }
    const ssize_t r = recv(sock, p, want, MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Recv::timeout;
      return Recv::error;
    }
    if (r == 0) return Recv::eof;
    if (header_got_ < sizeof len_) {
      header_got_ += static_cast<size_t>(r);
      if (header_got_ == sizeof len_) {
        if (len_ > max_len) return Recv::error;
        body_.resize(len_);
      }
    } else {
      body_got_ += static_cast<size_t>(r);
    }
  }
}

}  // namespace leap::env
