// Batched GEMM over strided tensors: out[i] = alpha * a[i] @ b[i] + beta * out[i] for every batch
// index i of the (broadcast) batch dims. Each matrix needs a unit stride in one of its two dims;
// the op layer copies operands that have neither. f32 and bf16 run on oneDNN (sgemm; the matmul
// primitive for bf16, which may write an f32 out), f64 on the reference kernel (blas.h).
#include "tidal/backend/cpu/kernels.h"
#include "tidal/backend/matmul_batch.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "tidal/backend/cpu/blas.h"
#include "tidal/backend/cpu/onednn_matmul.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

struct MatLayout {
  bool trans = false;
  int64_t ld = 0;
};

bool layout_of(int64_t rows, int64_t cols, int64_t sr, int64_t sc, MatLayout& m) {
  const int64_t r1 = std::max<int64_t>(rows, 1), c1 = std::max<int64_t>(cols, 1);
  if (sc == 1 || cols == 1) {
    const int64_t ld = rows == 1 ? c1 : sr;
    if (ld >= c1) {
      m = {false, ld};
      return true;
    }
  }
  if (sr == 1 || rows == 1) {
    const int64_t ld = cols == 1 ? r1 : sc;
    if (ld >= r1) {
      m = {true, ld};
      return true;
    }
  }
  return false;
}

// T: the operands' element type; C: the output's (bf16 operands may write f32).
template <typename T, typename C>
void matmul_typed(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;  // alpha, beta
  using blas::gemm;
  using onednn::gemm;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  Shape batch;
  for (int d = 0; d < out.dim() - 2; ++d) batch.push_back(out.shape()[d]);
  const int64_t nbatch = batch.numel();
  MatLayout la, lb;
  TIDAL_ASSERT(layout_of(m, k, a.stride(-2), a.stride(-1), la) && layout_of(k, n, b.stride(-2), b.stride(-1), lb),
               "matmul operands need a unit stride");
  const T* ap = static_cast<const T*>(a.raw_data());
  const T* bp = static_cast<const T*>(b.raw_data());
  C* cp = static_cast<C*>(out.raw_data());
  const std::vector<int64_t> sa = backend::batch_strides(a, batch), sb = backend::batch_strides(b, batch);
  const bool b_shared = std::all_of(sb.begin(), sb.end(), [](int64_t s) { return s == 0; });
  if (nbatch > 1 && b_shared && !la.trans && backend::rows_fold(a, batch)) {
    gemm(false, lb.trans, nbatch * m, n, k, S(alpha), ap, la.ld, bp, lb.ld, S(beta), cp, n);
    return;
  }
  auto one = [&](int64_t i) {
    int64_t oa = 0, ob = 0, rem = i;
    for (int d = batch.size() - 1; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * sa[size_t(d)];
      ob += idx * sb[size_t(d)];
    }
    gemm(la.trans, lb.trans, m, n, k, S(alpha), ap + oa, la.ld, bp + ob, lb.ld, S(beta), cp + i * m * n, n);
  };
  // Many small products: one per thread, each single-threaded. Few large ones: threaded GEMMs.
  const double flops = 2.0 * double(m) * double(n) * double(k);
  if (nbatch >= 2 && flops < 32e6) {
    parallel_for(0, nbatch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < nbatch; ++i) one(i);
  }
}

}  // namespace

// Whether a (rows x cols) matrix with these strides can be handed to the BLAS without a copy.
bool CpuKernels::matmul_operand_ok(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c) const {
  MatLayout m;
  return layout_of(rows, cols, stride_r, stride_c, m);
}

// a (..., m, k), b (..., k, n), out (..., m, n) contiguous; batch dims of a and b broadcast to out's.
void CpuKernels::matmul(Stream&, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  TIDAL_ASSERT(a.dtype() == b.dtype(), "matmul kernel got ", a.dtype(), " @ ", b.dtype());
  switch (a.dtype()) {
    case DType::f32:
      TIDAL_ASSERT(out.dtype() == DType::f32, "matmul kernel: f32 operands write f32, not ", out.dtype());
      return matmul_typed<float, float>(out, a, b, alpha, beta);
    case DType::f64:
      TIDAL_ASSERT(out.dtype() == DType::f64, "matmul kernel: f64 operands write f64, not ", out.dtype());
      return matmul_typed<double, double>(out, a, b, alpha, beta);
    case DType::bf16:
      if (out.dtype() == DType::f32) return matmul_typed<BFloat16, float>(out, a, b, alpha, beta);
      TIDAL_ASSERT(out.dtype() == DType::bf16, "matmul kernel: bf16 operands write bf16 or f32, not ", out.dtype());
      return matmul_typed<BFloat16, BFloat16>(out, a, b, alpha, beta);
    default: TIDAL_ASSERT(false, "matmul kernel got ", a.dtype());
  }
}

}  // namespace tidal::cpu
