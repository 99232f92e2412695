#include "tidal/backend/cpu/blas.h"

#include <dnnl.h>

#include <algorithm>

#include "tidal/base/error.h"
#include "tidal/base/parallel.h"

namespace tidal::cpu::blas {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  const dnnl_status_t st =
      dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  TIDAL_ASSERT(st == dnnl_success, "dnnl_sgemm failed with status ", int(st), " for m=", m, " n=", n, " k=", k,
               " lda=", lda, " ldb=", ldb, " ldc=", ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  auto A = [&](int64_t i, int64_t p) { return trans_a ? a[p * lda + i] : a[i * lda + p]; };
  auto B = [&](int64_t p, int64_t j) { return trans_b ? b[j * ldb + p] : b[p * ldb + j]; };
  parallel_for(0, m, std::max<int64_t>(1, 65536 / std::max<int64_t>(n * k, 1)), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      double* crow = c + i * ldc;
      for (int64_t j = 0; j < n; ++j) crow[j] = beta == 0.0 ? 0.0 : beta * crow[j];
      for (int64_t p = 0; p < k; ++p) {
        const double av = alpha * A(i, p);
        for (int64_t j = 0; j < n; ++j) crow[j] += av * B(p, j);
      }
    }
  });
}

const char* backend_name() { return "oneDNN sgemm"; }

}  // namespace tidal::cpu::blas
