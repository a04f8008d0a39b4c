#pragma once
// Unix-socket primitives shared by the zygote and the worker pool: one sendmsg / recvmsg with
// file descriptors attached (SCM_RIGHTS), and a wait for readability against a deadline. The
// framing (a packet per message for the zygote, a length-prefixed frame for the pool) stays with
// each user. No torch.
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <vector>

namespace leap::env {

/// One sendmsg of `n` bytes from `data` on `sock` with `fds` attached (at most `max_fds`; more
/// is a programming error and sends none), retried on EINTR, without SIGPIPE. Returns the bytes
/// sent (possibly fewer than `n` on a stream socket) or -1 with errno set.
ssize_t send_with_fds(int sock, const void* data, size_t n, const std::vector<int>& fds, size_t max_fds);

/// One recvmsg of at most `n` bytes into `data`, retried on EINTR. With `fds` set, descriptors
/// that arrive with it (at most `max_fds`; the kernel closes any beyond) are appended there, opened
/// close-on-exec. Returns the bytes read, 0 at end of stream, or -1 with errno set.
ssize_t recv_with_fds(int sock, void* data, size_t n, std::vector<int>* fds, size_t max_fds);

/// What wait_readable saw.
enum class Readable { yes, timeout, error };

/// Waits until `fd` is readable (or hung up) or `deadline` passes (never, when `timed` is false),
/// through EINTR. A hang-up counts as readable: the next read returns 0.
Readable wait_readable(int fd, bool timed, std::chrono::steady_clock::time_point deadline);

}  // namespace leap::env
