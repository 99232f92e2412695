#pragma once
// Raw memory a device provides (DeviceRuntime, runtime.h) to its caching allocators (allocator.h),
// which ask for it only when their cache has no block. The seam defines it and the allocator uses it,
// so the dependency runs one way: from the core's allocator down to the seam.
#include <cstdint>

namespace tidal {

struct MemoryBacking {
  void* (*alloc)(int64_t bytes);  // nullptr when the device has no more
  void (*free)(void* ptr, int64_t bytes);
  bool touches_memory;  // false for meta: addresses are fake, never read
  // Whether work queued on the device's streams may still use a block after the host freed it (CUDA
  // device memory: kernels run after their launch returned). The allocator then orders a block's
  // reuse on another stream after that work (allocator.h, Note [Cross-stream reuse]).
  bool stream_ordered = false;
  // Whether each system allocation is costly enough that the bytes a step showed it needs are worth
  // taking as one pool (pinned host memory: cudaHostAlloc pins page by page). Allocator::reserve_pool.
  bool pool_after_first_step = false;
  // Whether the allocator gives its cached free blocks back to the system before it asks the system for more,
  // when they hold at least the request's bytes but none fits it (allocator.h, Note [Release before growing]):
  // where a system allocation is cheap and the memory is the process's own (the CPU's RAM), so that what a step
  // holds never exceeds its peak of live blocks for lack of a block of the right size.
  bool release_before_growing = false;
  // Whether a cached block larger than a request serves it by splitting, and freed neighbours merge again
  // (allocator.h, Note [Splitting large blocks]): blocks above 1 MiB, where no stream is tracked. On the CPU,
  // so that a step's changing sizes reuse the RAM it already holds instead of asking the system again.
  bool split_large_blocks = false;
};

// Host memory for copies to and from a device: pinned (page-locked, what asynchronous device copies
// need) or pageable. On the CPU backend both are ordinary memory.
enum class HostMemory : uint8_t { pageable, pinned };

}  // namespace tidal
