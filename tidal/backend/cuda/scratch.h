#pragma once
// Device scratch for the CUDA kernels, allocated through tidal's allocator (so every byte is
// accounted) as temporary memory: a u8 tensor of `bytes` on `device`. Freed when the kernel returns,
// with its work still queued: an op that reuses the block on the same stream runs after that work.
#include <cstdint>

#include "tidal/memory_scope.h"
#include "tidal/tensor.h"

namespace tidal::cuda {

inline Tensor scratch_bytes(Device device, int64_t bytes) {
  MemoryScope temporary(MemoryCategory::temporary);
  return empty(Shape{bytes > 0 ? bytes : 1}, DType::u8, device);
}

}  // namespace tidal::cuda
