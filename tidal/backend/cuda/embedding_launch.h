#pragma once
// The embedding family's launchers (embedding.cu), called by embedding.cpp. ids: contiguous i32/i64 in
// [0, V) (checked by ops/).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tidal/dtype.h"

namespace tidal::cuda {

// out (n, C) contiguous = weight rows ids[r]; the weight has strides (row_stride, col_stride).
void launch_embedding_forward(cudaStream_t stream, DType dtype, void* out, const void* weight, int64_t row_stride,
                              int64_t col_stride, DType id_dtype, const void* ids, int64_t n, int64_t C);

// The scratch bytes launch_embedding_backward needs for n ids into V rows.
size_t embedding_backward_scratch_bytes(int64_t n, int64_t V);
// grad_weight (V, C) contiguous, every row written: row v = the sum of g (n, C) rows r with ids[r] == v,
// added in increasing r (a stable radix sort of the ids, then one thread per (v, c)); zeros elsewhere.
void launch_embedding_backward(cudaStream_t stream, DType dtype, void* grad_weight, const void* g, DType id_dtype,
                               const void* ids, int64_t n, int64_t V, int64_t C, void* scratch, size_t scratch_bytes);

}  // namespace tidal::cuda
