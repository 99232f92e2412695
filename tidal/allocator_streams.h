#pragma once
// Note [Cross-stream reuse]
// On CUDA a kernel runs after its launch returned, so the host frees a scratch tensor while the kernel
// that uses it may still be queued, and the block goes back to the cache (PyTorch's record_stream
// problem). Work queued later on the same stream runs after that kernel, so reuse on the stream the
// block was freed on is safe and costs nothing. Work on another stream (a side stream's task, a copy
// stream) may run first, so a cached block remembers the stream current when it was freed, and:
//   - reuse on that stream: no event, no wait;
//   - reuse on another stream S: S waits (a device-side wait, StreamImpl::wait) for an event on the
//     stream it was freed on. A block freed on the compute stream gets that event recorded at the
//     reuse (it captures the work queued before the free and some later: safe, and the frees, which
//     are mostly the compute stream's, pay nothing); one freed on a side stream gets it recorded at
//     the free (a side stream may be gone by the reuse, and a record queued behind its later work
//     would hold the host up);
//   - a block also used by work on another stream than the one it is freed on is marked with
//     Allocator::record_stream after that work was queued: its reuse on any other stream waits for
//     that event too.
// The allocator looks for a block freed on the requesting stream first (among the few of the fitting
// sizes) and takes a cross-stream one only when none fits, so overlapping streams rarely wait on each
// other. A block is first used on the stream current at its allocation: work on another stream that
// uses a new block first orders itself after that stream (offload's copies wait on an event of the
// compute stream), or allocates under that stream (StreamGuard), as offload's prefetch and the swap
// optimizer's buffers do. Streams are compared by address only; a side stream finishes its work
// before it is destroyed, so a new stream at the same address reusing its blocks waits for nothing.
// Only allocators whose backing is stream_ordered track streams (CUDA device memory). On the CPU a
// kernel has run when it returns, a side stream's kernels run inside its tasks, and copies and tasks
// hold the storages they use until they ran, so a freed block's last use is over: nothing is tracked
// and nothing changes. Pinned host memory on CUDA is the same: no kernel touches it, and every
// asynchronous copy holds its buffers until it completed (or its caller synchronizes first).
#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tidal/device.h"

namespace tidal {
namespace detail {
class StreamImpl;
struct EventState;
}  // namespace detail

// The stream a thread's work on `device` runs on (the current stream's implementation).
using CurrentStreamFn = detail::StreamImpl* (*)(Device device);

// A cached free block: its address and the stream current at its free (nullptr: streams not tracked).
struct FreeBlock {
  void* ptr;
  detail::StreamImpl* freed_on;
};
using FreeBlocks = std::multimap<int64_t, FreeBlock>;  // block size -> cached block

// An event of `stream`: work queued there that uses a block.
struct StreamEvent {
  const detail::StreamImpl* stream;
  std::shared_ptr<detail::EventState> event;
};
// Per block (live or cached) that has any: the events its reuse on another stream waits for.
using BlockStreamEvents = std::unordered_map<void*, std::vector<StreamEvent>>;

// Adds `e`, replacing an earlier event of the same stream (a stream runs in order: the later one covers it).
void add_stream_event(std::vector<StreamEvent>& events, StreamEvent e);

// What handing a cached block to work on another stream needs, done outside the allocator's lock.
struct ReuseWaits {
  detail::StreamImpl* record_on = nullptr;  // the stream it was freed on, when no event was recorded then
  std::vector<std::shared_ptr<detail::EventState>> events;
  bool empty() const { return record_on == nullptr && events.empty(); }
};

// Whether reusing `block` (with `events`, or nullptr) on `to` needs a wait.
bool needs_wait(const FreeBlock& block, const std::vector<StreamEvent>* events, const detail::StreamImpl* to);
// The waits for reusing `block` on `to`.
ReuseWaits reuse_waits(const FreeBlock& block, const std::vector<StreamEvent>* events, const detail::StreamImpl* to);
// Orders the work `to` runs from now on after the waits (records the lazy event, then waits for each).
void order_after(detail::StreamImpl& to, const ReuseWaits& waits);

}  // namespace tidal
