#pragma once
// A tensor as the device code sees it: a pointer, a dtype and up to kMaxDims sizes and strides (in
// elements), passed by value to kernels. Plain C++, included by the .cpp side (tensor_args.h makes
// them from Tensors) and by the .cu side (device_math.cuh reads them).
#include <cstdint>

#include "tidal/dtype.h"

namespace tidal::cuda {

inline constexpr int kMaxDims = 8;

struct Strided {
  void* data = nullptr;
  DType dtype = DType::f32;
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // 0 along a broadcast dim

  // The element offset of row-major index `linear` (0 <= linear < numel of sizes).
#if defined(__CUDACC__)
  __host__ __device__
#endif
      int64_t
      offset(int64_t linear) const {
    int64_t off = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d >= ndim) continue;
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
      off += i * strides[d];
    }
    return off;
  }
};

}  // namespace tidal::cuda
