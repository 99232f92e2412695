#pragma once
// The range recorder, a core primitive that profile/ reads: named time ranges (ops, autograd nodes,
// training phases) and the work side streams ran, on tidal's clock. Off by default; when off, a range costs one relaxed
// load of a flag and a branch (bench/profile_bench.cpp measures it). OpScope (memory_scope.h) records every op, the
// autograd engine every node's backward, the trainer its phases. See docs/profiling.md.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace tidal::profile {

namespace detail {
extern std::atomic<bool> g_recording;
int64_t range_begin();
// Ends a range begun at t0 on the calling thread; layer and module come from its memory context.
void range_end(const char* name, const char* kind, int64_t t0);
}  // namespace detail

inline bool recording() { return detail::g_recording.load(std::memory_order_relaxed); }

// Kinds of ranges (static strings, compared by pointer or content).
inline constexpr const char* kOp = "op";              // an op (OpScope)
inline constexpr const char* kBackward = "backward";  // an autograd node's backward
inline constexpr const char* kPhase = "phase";        // forward / backward / optimizer of a step
inline constexpr const char* kWait = "wait";          // the compute thread blocked on a side stream
inline constexpr const char* kComm = "comm";          // a blocking exchange between ranks

// Records [construction, destruction) when the recorder is on. `name` and `kind` must outlive the
// recording (string literals).
class Range {
 public:
  explicit Range(const char* name, const char* kind = kOp) : name_(name), kind_(kind) {
    if (recording()) t0_ = detail::range_begin();
  }
  ~Range() {
    if (t0_ >= 0) detail::range_end(name_, kind_, t0_);
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  const char* name_;
  const char* kind_;
  int64_t t0_ = -1;
};

struct RangeEvent {
  const char* name = nullptr;
  const char* kind = kOp;
  int64_t start_ns = 0, end_ns = 0;
  int layer = -1;
  const char* module = nullptr;  // the module's name: read it while the model lives
  int thread = 0;                // 0: the thread that started the recording (compute); others 1, 2, ...
};

// A task a side stream's worker ran (a copy, an offload write...).
struct StreamTaskEvent {
  std::string stream;
  std::string label;
  int64_t start_ns = 0, end_ns = 0;
};

// Records a task that a side stream's worker (or another helper thread) ran, on tidal's clock, as
// the stream's lane sees it; a "wait" of the "compute" stream is the compute thread blocked on one,
// a range on its own lane. Called by the thread that did the work; nothing while not recording.
void record_stream_task(const std::string& stream, const char* label, int64_t start_ns, int64_t end_ns);

// Starts recording on every thread (the calling thread is the compute lane); clears earlier data.
void start_recording();
void stop_recording();
// Hands over what was recorded so far (and forgets it).
std::vector<RangeEvent> take_ranges();
std::vector<StreamTaskEvent> take_stream_tasks();

}  // namespace tidal::profile
