#pragma once
// Batched GEMM over strided tensors: out[i] = alpha * a[i] @ b[i] + beta * out[i] for every batch
// index i of the (broadcast) batch dims. Each matrix needs a unit stride in one of its two dims;
// the op layer copies operands that have neither. f32 and bf16 run on oneDNN (sgemm; the matmul
// primitive for bf16, which may write an f32 out), f64 on the reference kernel (blas.h).
#include "tidal/tensor.h"

namespace tidal::cpu {

// Whether a (rows x cols) matrix with these strides can be handed to the BLAS without a copy.
bool blas_compatible(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c);

// a (..., m, k), b (..., k, n), out (..., m, n) contiguous; batch dims of a and b broadcast to out's.
void matmul_kernel(const Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0, double beta = 0.0);

}  // namespace tidal::cpu
