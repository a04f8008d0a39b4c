#include "env/device_lock.hpp"

namespace leap::env {

void DeviceLock::lock_shared() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return !writer_ && writers_waiting_ == 0; });
  ++readers_;
}

void DeviceLock::unlock_shared() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (--readers_ == 0) cv_.notify_all();
}

void DeviceLock::lock() {
  std::unique_lock<std::mutex> lock(mutex_);
  ++writers_waiting_;
  cv_.wait(lock, [&] { return !writer_ && readers_ == 0; });
  --writers_waiting_;
  writer_ = true;
}

void DeviceLock::unlock() {
  std::lock_guard<std::mutex> lock(mutex_);
  writer_ = false;
  cv_.notify_all();
}

}  // namespace leap::env
