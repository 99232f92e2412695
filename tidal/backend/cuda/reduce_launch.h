#pragma once
// The reduction family's launchers (reduce.cu), called by reduce.cpp. Inputs are contiguous
// (outer, n, inner) blocks reduced over n; outputs are contiguous (outer, inner).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/dtype.h"

namespace tidal::cuda {

// out = scale * sum over n of x (floating dtype `dtype`, accumulated in f32 for bf16).
void launch_sum(cudaStream_t stream, DType dtype, void* out, const void* x, int64_t outer, int64_t n, int64_t inner,
                double scale);
// values = max over n, indices = its first position (a NaN wins: the first NaN), as the CPU backend.
void launch_max(cudaStream_t stream, DType dtype, void* values, int64_t* indices, const void* x, int64_t outer,
                int64_t n, int64_t inner);
// grad_in (outer, n, inner), already zero: grad_in[o, indices[o, j], j] = g[o, j].
void launch_max_backward(cudaStream_t stream, DType dtype, void* grad_in, const void* g, const int64_t* indices,
                         int64_t outer, int64_t n, int64_t inner);

}  // namespace tidal::cuda
