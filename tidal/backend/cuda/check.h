#pragma once
// CUDA's errors as tidal errors, never ignored: every runtime call and every launch is checked, and
// the message names the call, where it was made and what CUDA said. Plain C++ (no tidal headers), so
// the device code (.cu) includes it too.
#include <cuda_runtime_api.h>

#include "tidal/dtype.h"

namespace tidal::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line);
// A kernel given a dtype it does not implement (a bug: ops/ checks dtypes first).
[[noreturn]] void unsupported_dtype(const char* kernel, DType dtype);

}  // namespace tidal::cuda

#define TIDAL_CUDA_CHECK(call)                                                       \
  do {                                                                               \
    const cudaError_t tidal_cuda_error_ = (call);                                    \
    if (tidal_cuda_error_ != cudaSuccess) [[unlikely]]                               \
      ::tidal::cuda::throw_cuda_error(tidal_cuda_error_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: a bad configuration (too many threads, too much shared memory) shows here.
#define TIDAL_CUDA_CHECK_LAUNCH() TIDAL_CUDA_CHECK(cudaGetLastError())
