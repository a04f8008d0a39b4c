#pragma once
// The job socket's messages between WorkerPool (the parent) and a worker (env/worker_loop.cpp):
// a frame is an 8-byte length, then the JSON text (env/worker_job.hpp encodes and decodes it); the
// job's descriptors ride on the first byte (env/fd_socket.hpp). Also the status page both sides
// map: the running launch's index, and the worker's out-of-memory flag. No torch.
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace leap::env {

/// Descriptors a job frame may carry: the tensor memfd and the artifact's file.
inline constexpr size_t kMaxJobFds = 2;
/// A worker's reply is small (a verdict, a bounded message, one time per trial): anything larger
/// is a forged frame of the code it runs, refused before it is read.
inline constexpr uint64_t kMaxReplyBytes = uint64_t(16) << 20;
/// What a worker sends once a job's memory is mapped, before it loads any code of the answer; the
/// parent then reads the worker's CPU clock and answers with one byte ("go").
inline constexpr const char* kMappedFrame = "{\"phase\":\"mapped\"}";
/// Bytes of the status page (env/worker_pool.cpp maps it for each worker).
inline constexpr size_t kStatusPageBytes = 4096;

/// How a receive ended.
enum class Recv { ok, eof, timeout, error };

/// Sends all `n` bytes (through EINTR, without SIGPIPE); false when the socket failed.
bool send_all(int fd, const char* p, size_t n);
/// Sends one frame: its length, then `body`; `attach` (at most kMaxJobFds) rides on the first byte.
bool send_frame(int sock, const std::string& body, const std::vector<int>& attach = {});
/// Worker side: blocks until the parent's one-byte "go"; false when the socket closed.
bool await_go(int sock);
/// Waits for readability until `deadline` (none if `timed` is false).
Recv wait_for_frame(int sock, bool timed, std::chrono::steady_clock::time_point deadline);
/// Receives exactly `n` bytes into `p` (descriptors of the first chunk appended to `fd_out`).
Recv recv_exact(int sock, char* p, size_t n, bool timed, std::chrono::steady_clock::time_point deadline,
                std::vector<int>* fd_out);
/// Receives one whole frame into `body` (blocking; an announced length over `max_len` is an error).
Recv recv_frame(int sock, std::string& body, bool timed, std::chrono::steady_clock::time_point deadline,
                std::vector<int>* fd_out = nullptr, uint64_t max_len = uint64_t(1) << 30);

/// Reads one frame in pieces, as its bytes arrive, without blocking: the pool's watch (CPU time,
/// memory, threads, wall time) keeps running while a reply is read, so a worker that sends a
/// header and stalls is still watched.
class FrameReader {
 public:
  /// Reads what the socket holds now. ok: the frame is complete (body()); timeout: more is to
  /// come; eof / error: the socket closed, or the frame is longer than `max_len`.
  Recv step(int sock, uint64_t max_len);
  bool started() const { return header_got_ > 0; }
  std::string& body() { return body_; }
  /// Bytes read so far and the frame's length (0 until its header is complete).
  size_t bytes_read() const { return header_got_ + body_got_; }
  uint64_t length() const { return header_got_ == sizeof len_ ? len_ : 0; }

 private:
  uint64_t len_ = 0;
  size_t header_got_ = 0;
  size_t body_got_ = 0;
  std::string body_;
};

/// The out-of-memory flag on the status page whose first word is the running launch's index
/// (`page`): the worker raises it when it crashed because its address space was full.
inline std::atomic<int>* memory_flag_of(std::atomic<int>* page) {
  return reinterpret_cast<std::atomic<int>*>(reinterpret_cast<char*>(page) + 64);
}

/// The signal a worker that is pid 1 of its own pid namespace died of, on the status page whose
/// first word is the running launch's index (`page`): the kernel drops a signal that such a
/// process sends itself (an abort()'s SIGABRT), so its handler notes the signal here and exits
/// with 128 + the signal; 0 when none was noted.
inline std::atomic<int>* fatal_signal_of(std::atomic<int>* page) {
  return reinterpret_cast<std::atomic<int>*>(reinterpret_cast<char*>(page) + 128);
}

}  // namespace leap::env
