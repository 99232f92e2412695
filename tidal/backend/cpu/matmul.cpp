// Batched GEMM over strided tensors: out[i] = alpha * a[i] @ b[i] + beta * out[i] for every batch
// index i of the (broadcast) batch dims. Each matrix needs a unit stride in one of its two dims;
// the op layer copies operands that have neither. f32 and bf16 run on oneDNN (sgemm; the matmul
// primitive for bf16, which may write an f32 out), f64 on the reference kernel (blas.h).
#include "tidal/backend/cpu/kernels.h"
#include "tidal/backend/matmul_batch.h"

#include <omp.h>

#include <algorithm>
#include <exception>
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

// One GEMM: oneDNN's matmul primitive for bf16 (exact or any rows), its sgemm for f32, the reference for f64.
template <typename T, typename C, typename S>
void gemm(onednn::Rows rows, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, S alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, S beta, C* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, BFloat16>)
    onednn::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, rows);
  else
    blas::gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// T: the operands' element type; C: the output's (bf16 operands may write f32).
template <typename T, typename C>
void matmul_typed(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta, onednn::Rows rows) {
  using S = std::conditional_t<std::is_same_v<T, double>, double, float>;  // alpha, beta
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
    gemm(rows, false, lb.trans, nbatch * m, n, k, S(alpha), ap, la.ld, bp, lb.ld, S(beta), cp, n);
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
    gemm(rows, la.trans, lb.trans, m, n, k, S(alpha), ap + oa, la.ld, bp + ob, lb.ld, S(beta), cp + i * m * n, n);
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

void matmul_any(const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta, onednn::Rows rows) {
  TIDAL_ASSERT(a.dtype() == b.dtype(), "matmul kernel got ", a.dtype(), " @ ", b.dtype());
  switch (a.dtype()) {
    case DType::f32:
      TIDAL_ASSERT(out.dtype() == DType::f32, "matmul kernel: f32 operands write f32, not ", out.dtype());
      return matmul_typed<float, float>(out, a, b, alpha, beta, rows);
    case DType::f64:
      TIDAL_ASSERT(out.dtype() == DType::f64, "matmul kernel: f64 operands write f64, not ", out.dtype());
      return matmul_typed<double, double>(out, a, b, alpha, beta, rows);
    case DType::bf16:
      if (out.dtype() == DType::f32) return matmul_typed<BFloat16, float>(out, a, b, alpha, beta, rows);
      TIDAL_ASSERT(out.dtype() == DType::bf16, "matmul kernel: bf16 operands write bf16 or f32, not ", out.dtype());
      return matmul_typed<BFloat16, BFloat16>(out, a, b, alpha, beta, rows);
    default: TIDAL_ASSERT(false, "matmul kernel got ", a.dtype());
  }
}

double flops_of(const MatmulTask& t) { return 2.0 * double(t.out->numel()) * double(t.a->size(-1)); }

}  // namespace

// Whether a (rows x cols) matrix with these strides can be handed to the BLAS without a copy.
bool CpuKernels::matmul_operand_ok(int64_t rows, int64_t cols, int64_t stride_r, int64_t stride_c) const {
  MatLayout m;
  return layout_of(rows, cols, stride_r, stride_c, m);
}

// a (..., m, k), b (..., k, n), out (..., m, n) contiguous; batch dims of a and b broadcast to out's.
void CpuKernels::matmul(Stream&, const Tensor& out, const Tensor& a, const Tensor& b, double alpha, double beta) {
  matmul_any(out, a, b, alpha, beta, onednn::Rows::exact);
}

// Note [Grouped products]
// An MoE layer's experts are small products (32 experts top-4 over 1024 tokens, hidden 512: ~128 rows each)
// whose row counts change every step. Run one after another, each on every thread, they waste the threads
// (a 128 x 256 x 512 bf16 product takes 146 us on 2 threads, 153 us on one: Zen 4) and, in bf16, oneDNN made
// a primitive for every new row count (0.2-10 ms each, ~600 a step). So matmul_many runs the products
// concurrently, one thread each, the largest first (dynamic: a thread takes the next when done), every
// bf16 one through the primitive for any rows (onednn::Rows::any). Each product runs on one thread
// whichever thread takes it, so its bits depend only on its operands (and on the call's shapes, which choose
// the mode). Few large products (fewer than two a thread, one of them >= 32 MFLOP) run one after another,
// each on every thread, bf16 ones through the primitive for any rows too.
void CpuKernels::matmul_many(Stream&, std::span<const MatmulTask> tasks) {
  const int threads = num_threads();
  std::vector<double> flops(tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) flops[i] = flops_of(tasks[i]);
  const double largest = flops.empty() ? 0.0 : *std::max_element(flops.begin(), flops.end());
  const bool concurrent = tasks.size() >= 2 && threads > 1 && !omp_in_parallel() && !in_stream_worker() &&
                          !loops_run_serially() && (int64_t(tasks.size()) >= 2 * threads || largest < 32e6);
  if (!concurrent) {
    for (const MatmulTask& t : tasks) matmul_any(*t.out, *t.a, *t.b, t.alpha, t.beta, onednn::Rows::any);
    return;
  }
  std::vector<size_t> order(tasks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return flops[x] > flops[y]; });
  std::exception_ptr error;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int64_t i = 0; i < int64_t(order.size()); ++i) {
    const MatmulTask& t = tasks[order[size_t(i)]];
    try {
      matmul_any(*t.out, *t.a, *t.b, t.alpha, t.beta, onednn::Rows::any);
    } catch (...) {
#pragma omp critical(tidal_matmul_many_error)
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace tidal::cpu
