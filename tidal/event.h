#pragma once
// An Event marks a point in a Stream's queue (CUDA semantics): record() captures the work enqueued
// so far, synchronize() blocks the host until that work has run, a Stream can wait() for it. An
// error thrown by that work is stored on the event and rethrown by synchronize(). See docs/streams.md.
#include <cstdint>
#include <memory>

namespace tidal {

class Stream;
namespace detail {
struct EventState;
}

class Event {
 public:
  Event() = default;

  // Captures all work enqueued on `stream` so far (re-recording starts a new capture).
  void record(Stream& stream);
  // Blocks until the captured work has run; rethrows an error it raised. No-op if never recorded.
  void synchronize() const;
  // Whether the captured work has run (true if never recorded). Does not throw.
  bool query() const;
  bool recorded() const { return state_ != nullptr; }
  // Milliseconds between this event's completion and `end`'s; both must have completed.
  double elapsed_ms(const Event& end) const;
  // Completion time on tidal's clock (base/clock.h); the event must have completed.
  int64_t time_ns() const;

  const std::shared_ptr<detail::EventState>& state() const { return state_; }

 private:
  std::shared_ptr<detail::EventState> state_;
};

}  // namespace tidal
