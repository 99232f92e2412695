#pragma once
// Dynamic shared memory past the 48 KiB every kernel may take: a kernel opts in to a size
// (cudaFuncAttributeMaxDynamicSharedMemorySize) up to the device's limit (227 KiB on Hopper). Plain C++ on the
// CUDA runtime's API: a family's .cpp checks its size against the limit and refuses by name what does not fit,
// its .cu opts in before the launch.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/backend/cuda/check.h"

namespace tidal::cuda {

inline constexpr int64_t kDefaultSharedBytes = 48 * 1024;

// The most dynamic shared memory one block may take on `device`.
inline int64_t max_shared_bytes(int device) {
  int bytes = 0;
  TIDAL_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

// Lets `kernel`, whose own (static) shared memory is `static_bytes`, launch with `bytes` of dynamic shared memory (a
// no-op while both fit the default 48 KiB).
template <class Kernel>
void allow_shared_bytes(Kernel* kernel, int64_t bytes, int64_t static_bytes = 0) {
  if (bytes + static_bytes > kDefaultSharedBytes)
    TIDAL_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}

}  // namespace tidal::cuda
