#pragma once
// CPU kernels of softmax and log_softmax over contiguous inputs viewed as (outer, n, inner), normalizing
// over n. inner == 1 (the last dim) is the fast path: one row at a time, vectorized along it; inner > 1
// vectorizes across blocks of the inner dim, so no transpose is needed for other dims.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "tidal/backend/cpu/activation.h"
#include "tidal/seam/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

// Max of a contiguous row (NaNs are skipped here; they reach the result through the exp sum).
template <typename T>
inline acc_t<T> row_max(const T* x, int64_t n) {
  using A = acc_t<T>;
  A m = -std::numeric_limits<A>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = A(x[i]) > m ? A(x[i]) : m;
  return m;
}

// sum(exp(x - m)) of a contiguous row (Note [Vectorizable math]).
template <typename T>
inline acc_t<T> row_sum_exp(const T* x, int64_t n, acc_t<T> m) {
  using A = acc_t<T>;
  A s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += fast_exp(A(x[i]) - m);
  return s;
}

// log(sum(exp(x))) of a contiguous row, reading it once: blocks that fit in L1 get their max, the
// running sum is rescaled when the max grows, and the exp sum rereads the block from L1. For long
// rows (a vocabulary) this overlaps the memory stream with the exp work of a second pass.
template <typename T>
inline acc_t<T> row_logsumexp(const T* x, int64_t n) {
  using A = acc_t<T>;
  constexpr int64_t kBlock = 2048;
  A m = -std::numeric_limits<A>::infinity(), s = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    const A bm = row_max(x + b, len);
    if (bm > m) {
      s *= fast_exp(m - bm);  // 0 while m is still -inf
      m = bm;
    }
    s += row_sum_exp(x + b, len, m);
  }
  return m + std::log(s);
}

}  // namespace tidal::cpu
