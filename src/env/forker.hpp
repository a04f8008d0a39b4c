#pragma once
// One process-wide thread that starts every child process of the pool and the zygote.
//
// PR_SET_PDEATHSIG fires when the *thread* that forked a child exits, not the process: a worker
// forked from a short-lived caller thread (a grading thread that replaces a retired worker) would
// be SIGKILLed when that thread ends, possibly in the middle of another thread's job. This thread
// never exits, so children started on it live exactly as long as the process.
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

namespace leap::env {

/// Runs closures on the process-wide forking thread, one at a time.
class Forker {
 public:
  /// The process-wide instance (never destroyed: its thread lives until the process ends).
  static Forker& get() {
    static Forker* f = new Forker();
    return *f;
  }
  /// Runs `fn` on the forking thread and returns its result (exceptions travel back).
  template <class F>
  auto run(F fn) -> decltype(fn()) {
    auto task = std::make_shared<std::packaged_task<decltype(fn())()>>(std::move(fn));
    auto fut = task->get_future();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.emplace_back([task] { (*task)(); });
    }
    cv_.notify_one();
    return fut.get();
  }

 private:
  Forker() { std::thread([this] { loop(); }).detach(); }
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        job = std::move(queue_.front());
        queue_.pop_front();
      }
      job();
    }
  }
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
};

}  // namespace leap::env
