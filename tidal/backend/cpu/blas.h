#pragma once
// The one wrapper around the BLAS (docs/performance.md, "Choosing a BLAS"): oneDNN's sgemm for f32,
// a blocked reference kernel for f64 (gradchecks). Row-major:
//   C (m x n) = alpha * op(A) (m x k) * op(B) (k x n) + beta * C
// op(X) = X or X^T; lda/ldb/ldc are row strides of the stored matrices.
#include <cstdint>

namespace tidal::cpu::blas {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// The library behind gemm, for logs and docs.
const char* backend_name();

}  // namespace tidal::cpu::blas
