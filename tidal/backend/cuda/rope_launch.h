#pragma once
// The RoPE family's launcher (rope.cu), called by rope.cpp (which computes the cos/sin tables on the
// host, bit for bit as the CPU backend, and copies them over).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/dtype.h"

namespace tidal::cuda {

// A (B, H, T, D) tensor, a (T, D) table (sizes[0..1] = 1, strides 0) or a (B, T, D) table (sizes[1] = 1,
// stride 0) with its element strides.
struct RopeView {
  int64_t sizes[4] = {1, 1, 1, 1};
  int64_t strides[4] = {0, 0, 0, 0};
};
// out = x * cos + rotate_half(x) * sin, or its adjoint with `transpose` (the CPU backend's rope).
void launch_rope(cudaStream_t stream, DType dtype, void* out, const RopeView& out_view, const void* x,
                 const RopeView& x_view, const void* cos, const RopeView& cos_view, const void* sin,
                 const RopeView& sin_view, bool transpose);

}  // namespace tidal::cuda
