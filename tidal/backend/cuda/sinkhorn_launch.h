#pragma once
// The Sinkhorn-Knopp family's launchers (sinkhorn.cu), called by sinkhorn.cpp: contiguous (matrices, n, n) of one
// floating dtype, projected as SinkhornArgs says (seam/kernel_args.h; the CPU's backend/cpu/sinkhorn.cpp).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/dtype.h"
#include "tidal/seam/kernel_args.h"

namespace tidal::cuda {

// A matrix's n * n entries are one thread each, in one block: n <= 32.
inline constexpr int64_t kSinkhornMaxN = 32;

// The shared memory one matrix's backward holds, in bytes: every step's output (n * n) and divisors (n), and the
// gradient (n * n), in the accumulate type (f32 for bf16 and f32, f64 for f64).
inline int64_t sinkhorn_backward_matrix_bytes(DType dtype, const SinkhornArgs& a) {
  const int64_t steps = 2 * a.iters - 1, nn = a.n * a.n;
  return (steps * (nn + a.n) + nn) * (dtype == DType::f64 ? 8 : 4);
}

// out = the projection of x.
void launch_sinkhorn_forward(cudaStream_t stream, DType dtype, void* out, const void* x, const SinkhornArgs& a);
// dx from g: the 2 * iters - 1 normalizations recomputed from x per matrix, then run in reverse.
void launch_sinkhorn_backward(cudaStream_t stream, DType dtype, void* dx, const void* g, const void* x,
                              const SinkhornArgs& a);

}  // namespace tidal::cuda
