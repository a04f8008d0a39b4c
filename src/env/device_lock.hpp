#pragma once
// The device lock of one environment (issue "GPU path II", item 3): a timing window (candidate
// or reference) holds it exclusively, a correctness run shares it, so no other work of the
// environment runs on the device (GPU, or the CPU cores on the cpu backend) while something is
// being timed. Writer-preferring: once a timing window waits, new correctness runs wait behind
// it, so a steady stream of correctness runs cannot starve the timing.
#include <condition_variable>
#include <mutex>

namespace leap::env {

/// A readers-writer lock that prefers writers (timing windows).
class DeviceLock {
 public:
  /// Shared: a correctness run. Blocks while a timing window holds or waits for the lock.
  void lock_shared();
  void unlock_shared();
  /// Exclusive: a timing window. Blocks until no correctness run holds the lock.
  void lock();
  void unlock();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  int readers_ = 0;
  int writers_waiting_ = 0;
  bool writer_ = false;
};

}  // namespace leap::env
