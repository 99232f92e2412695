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
};

// Host memory for copies to and from a device: pinned (page-locked, what asynchronous device copies
// need) or pageable. On the CPU backend both are ordinary memory.
enum class HostMemory : uint8_t { pageable, pinned };

}  // namespace tidal
