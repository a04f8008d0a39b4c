#include "util/fatal.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

namespace leap::util {

namespace {
std::atomic<void (*)(const char*)> g_hook{nullptr};
std::atomic<double> g_interrupt_at{0.0};
}  // namespace

void set_fatal_exit_hook(void (*hook)(const char* reason)) { g_hook.store(hook); }

void fatal_exit(const std::string& message, int code) {
  std::fprintf(stderr, "leap: error: %s\n", message.c_str());
  std::fflush(stderr);
  if (auto hook = g_hook.load()) hook(message.c_str());
  _exit(code);
}

void note_interrupt() {
  double expected = 0.0;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  g_interrupt_at.compare_exchange_strong(expected, now);
}

double interrupt_requested_at() { return g_interrupt_at.load(); }

}  // namespace leap::util
