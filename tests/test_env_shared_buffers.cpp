// The shared tensor memory's recycling (env/shared_buffers.hpp): memory handed to a process is
// never handed to another job while any thread of that process can still write into it, and
// recycled memory starts zeroed like a fresh memfd.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "env/shared_buffers.hpp"

using namespace leap::env;

namespace {

// Two float32 tensors of `numel` elements each (an input and an output).
std::vector<BoundTensor> tensors(int64_t numel) {
  BoundTensor in{"x", DType::float32, {numel}, TensorRole::input};
  BoundTensor out{"y", DType::float32, {numel}, TensorRole::output};
  return {in, out};
}

bool all_zero(const SharedBuffers& b) {
  for (size_t i = 0; i < b.size(); ++i) {
    const auto* p = static_cast<const unsigned char*>(b.data(i));
    for (size_t k = 0; k < b.bytes(i); ++k)
      if (p[k]) return false;
  }
  return true;
}

// Waits up to 10 s for process_exited(pid).
bool exited_within(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    if (process_exited(pid)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A child that maps `fd` and writes 0x5A over all of it until it is killed; returns its pid
// once it has written once.
pid_t start_writer(int fd, size_t bytes, bool main_thread_exits) {
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(ready[0]);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) _exit(3);
    auto write_forever = [p, bytes, ready] {
      std::memset(p, 0x5A, bytes);
      if (write(ready[1], "r", 1) != 1) _exit(4);
      for (;;) std::memset(p, 0x5A, bytes);
    };
    if (!main_thread_exits) write_forever();
    std::thread(write_forever).detach();
    syscall(SYS_exit, 0);  // this thread only: the process lives on in the writer thread
  }
  close(ready[1]);
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  return pid;
}

}  // namespace

TEST_CASE("env shared buffers: memory handed to a process is reused only once all its threads have exited, zeroed") {
  for (bool main_thread_exits : {false, true}) {
    CAPTURE(main_thread_exits);
    // A size class of its own in this process: 3 MiB of tensors (the 4-MiB class), then 1.5 MiB
    // (the 2-MiB class).
    const int64_t numel = (main_thread_exits ? (int64_t(3) << 19) : (int64_t(3) << 20)) / 8;
    pid_t writer = -1;
    {
      SharedBuffers first(tensors(numel));
      writer = start_writer(first.fd(), first.layout().total_bytes, main_thread_exits);
      first.sent_to(writer);
    }
    // The writer still runs (with its main thread gone, in its other thread): its memory is not
    // handed out; a fresh memfd is.
    CHECK_FALSE(process_exited(writer));
    {
      SharedBuffers second(tensors(numel));
      CHECK_FALSE(second.recycled());
      CHECK(all_zero(second));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      CHECK(all_zero(second));  // nothing writes into it
      // Kept alive here, so the next one cannot take this (unheld) memory instead.
      kill(writer, SIGKILL);
      REQUIRE(exited_within(writer));  // a zombie, not yet reaped: exited all the same
      SharedBuffers third(tensors(numel));
      CHECK(third.recycled());  // the writer's memory, now that nothing of it runs
      CHECK(all_zero(third));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      CHECK(all_zero(third));
    }
    int status = 0;
    waitpid(writer, &status, 0);
    CHECK(process_exited(writer));  // reaped: gone
  }
}

TEST_CASE("env shared buffers: recycled memory starts zeroed, the same size class only") {
  const int64_t numel = (int64_t(5) << 20) / 8;  // the 8-MiB class
  size_t large_total = 0;
  {
    SharedBuffers a(tensors(numel));
    large_total = a.layout().total_bytes;
    std::memset(a.data(0), 0x7F, a.bytes(0));
    std::memset(a.data(1), 0x7F, a.bytes(1));
  }
  {
    // A smaller job of the class after a larger one: nothing of the larger job's, within its own
    // mapping or beyond it (the memfd holds both).
    SharedBuffers c(tensors(numel - 50000));
    CHECK(c.recycled());
    CHECK(all_zero(c));
    const auto* base = static_cast<const unsigned char*>(c.data(0)) - c.layout().offsets[0];
    REQUIRE(c.layout().total_bytes < large_total);
    CHECK(std::all_of(base, base + large_total, [](unsigned char x) { return x == 0; }));
    std::memset(c.data(0), 0x11, c.bytes(0));
  }
  SharedBuffers small(tensors(numel / 8));  // another class: fresh
  CHECK_FALSE(small.recycled());
  SharedBuffers b(tensors(numel + 1000));  // the same class, a slightly larger layout
  CHECK(b.recycled());
  CHECK(all_zero(b));
  CHECK(process_exited(getpid()) == false);
}
