// The shared Unix-socket primitives (env/fd_socket.hpp): descriptors travel with a message and
// arrive close-on-exec, a receiver without room for them gets none, and a wait times out.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

#include "env/fd_socket.hpp"

using namespace leap::env;

TEST_CASE("env fd socket: descriptors travel with a message, close-on-exec, waits time out") {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  int pipe_fds[2];
  REQUIRE(pipe(pipe_fds) == 0);

  const std::string text = "hello";
  REQUIRE(send_with_fds(sv[0], text.data(), text.size(), {pipe_fds[0], pipe_fds[1]}, 2) ==
          static_cast<ssize_t>(text.size()));
  const auto soon = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  REQUIRE(wait_readable(sv[1], true, soon) == Readable::yes);
  char buf[16];
  std::vector<int> got;
  REQUIRE(recv_with_fds(sv[1], buf, sizeof buf, &got, 2) == static_cast<ssize_t>(text.size()));
  CHECK(std::string(buf, text.size()) == text);
  REQUIRE(got.size() == 2);
  for (size_t i = 0; i < 2; ++i) {  // the same pipe ends, new numbers, close-on-exec
    struct stat a {}, b {};
    REQUIRE(fstat(got[i], &a) == 0);
    REQUIRE(fstat(i == 0 ? pipe_fds[0] : pipe_fds[1], &b) == 0);
    CHECK(a.st_ino == b.st_ino);
    CHECK((fcntl(got[i], F_GETFD) & FD_CLOEXEC) != 0);
  }
  REQUIRE(write(got[1], "x", 1) == 1);  // the received write end feeds the original read end
  char c = 0;
  CHECK(read(pipe_fds[0], &c, 1) == 1);
  CHECK(c == 'x');

  // More descriptors than the sender allows: refused, nothing sent.
  CHECK(send_with_fds(sv[0], text.data(), text.size(), {pipe_fds[0], pipe_fds[1]}, 1) < 0);
  // Nothing to read: the wait times out.
  CHECK(wait_readable(sv[1], true, std::chrono::steady_clock::now() + std::chrono::milliseconds(20)) ==
        Readable::timeout);
  // A receiver that takes no descriptors gets the bytes and none of the descriptors.
  REQUIRE(send_with_fds(sv[0], text.data(), text.size(), {pipe_fds[0]}, 2) == static_cast<ssize_t>(text.size()));
  CHECK(recv_with_fds(sv[1], buf, sizeof buf, nullptr, 0) == static_cast<ssize_t>(text.size()));
  // The peer gone: readable, and the read returns 0 (end of stream).
  close(sv[0]);
  CHECK(wait_readable(sv[1], true, soon) == Readable::yes);
  std::vector<int> none;
  CHECK(recv_with_fds(sv[1], buf, sizeof buf, &none, 2) == 0);
  CHECK(none.empty());
  for (int fd : got) close(fd);
  close(sv[1]);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
}
