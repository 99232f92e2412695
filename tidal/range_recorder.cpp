#include "tidal/range_recorder.h"

#include <cstring>
#include <mutex>
#include <thread>

#include "tidal/base/clock.h"
#include "tidal/memory_context.h"

namespace tidal::profile {
namespace detail {
std::atomic<bool> g_recording{false};
}  // namespace detail

namespace {

// One buffer for all threads: ranges come from the compute thread (and rarely from stream workers),
// so a mutex costs less than per-thread buffers would in code.
struct Buffers {
  std::mutex mu;
  std::vector<RangeEvent> ranges;
  std::vector<StreamTaskEvent> tasks;
  int next_thread = 1;
  uint64_t generation = 0;  // bumped by start_recording: threads take new numbers
  std::thread::id compute;  // the thread that started the recording
};

Buffers& buffers() {
  static Buffers* b = new Buffers();  // never destroyed: workers may record during shutdown
  return *b;
}

struct ThreadId {
  uint64_t generation = ~uint64_t(0);
  int id = 0;
};
thread_local ThreadId t_id;

int thread_index_locked(Buffers& b) {
  if (t_id.generation != b.generation) {
    t_id.generation = b.generation;
    t_id.id = std::this_thread::get_id() == b.compute ? 0 : b.next_thread++;
  }
  return t_id.id;
}

}  // namespace

namespace detail {

int64_t range_begin() { return now_ns(); }

void range_end(const char* name, const char* kind, int64_t t0) {
  const int64_t t1 = now_ns();
  const MemoryContext& ctx = memory_context();
  Buffers& b = buffers();
  std::lock_guard<std::mutex> lock(b.mu);
  if (!recording()) return;  // stopped while the range was open
  b.ranges.push_back({name, kind, t0, t1, ctx.layer, ctx.module, thread_index_locked(b)});
}

}  // namespace detail

void record_stream_task(const std::string& stream, const char* label, int64_t start_ns, int64_t end_ns) {
  if (!recording()) return;
  if (label != nullptr && std::strcmp(label, "wait") == 0 && stream == "compute") {
    // The compute thread blocked on a side stream: a range on its own lane.
    const MemoryContext& ctx = memory_context();
    Buffers& b = buffers();
    std::lock_guard<std::mutex> lock(b.mu);
    b.ranges.push_back({"wait", kWait, start_ns, end_ns, ctx.layer, ctx.module, thread_index_locked(b)});
    return;
  }
  Buffers& b = buffers();
  std::lock_guard<std::mutex> lock(b.mu);
  b.tasks.push_back({stream, label != nullptr ? label : "task", start_ns, end_ns});
}

void start_recording() {
  Buffers& b = buffers();
  {
    std::lock_guard<std::mutex> lock(b.mu);
    b.ranges.clear();
    b.tasks.clear();
    b.ranges.reserve(1 << 14);
    b.next_thread = 1;
    ++b.generation;
    b.compute = std::this_thread::get_id();
  }
  detail::g_recording.store(true);
}

void stop_recording() { detail::g_recording.store(false); }

std::vector<RangeEvent> take_ranges() {
  Buffers& b = buffers();
  std::lock_guard<std::mutex> lock(b.mu);
  std::vector<RangeEvent> out = std::move(b.ranges);
  b.ranges.clear();
  return out;
}

std::vector<StreamTaskEvent> take_stream_tasks() {
  Buffers& b = buffers();
  std::lock_guard<std::mutex> lock(b.mu);
  std::vector<StreamTaskEvent> out = std::move(b.tasks);
  b.tasks.clear();
  return out;
}

}  // namespace tidal::profile
