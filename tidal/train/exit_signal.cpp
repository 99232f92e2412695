#include "tidal/train/exit_signal.h"

#include <atomic>

namespace tidal::train {
namespace {

std::atomic<int> g_received{0};  // async-signal-safe: lock-free on every platform tidal builds for

void on_signal(int) { g_received.store(1, std::memory_order_relaxed); }

}  // namespace

ExitSignal::ExitSignal(bool on) : on_(on) {
  if (!on_) return;
  g_received.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, &previous_);
}

ExitSignal::~ExitSignal() {
  if (on_) sigaction(SIGTERM, &previous_, nullptr);
}

bool ExitSignal::received() const { return on_ && g_received.load(std::memory_order_relaxed) != 0; }

}  // namespace tidal::train
