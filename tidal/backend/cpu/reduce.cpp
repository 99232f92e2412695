// CPU reduction kernels over a contiguous input viewed as (outer, n, inner), reducing n.
#include "tidal/backend/cpu/kernels.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

constexpr int64_t kChunk = 16384;  // fixed chunk of a long row: the sum order never depends on threads
constexpr int64_t kInnerBlock = 512;

// Sum of n values with 16 independent accumulators (vectorizes), combined pairwise.
template <typename T>
acc_t<T> row_sum(const T* p, int64_t n) {
  using A = acc_t<T>;
  A acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += A(p[i + k]);
  for (; i < n; ++i) acc[i % 16] += A(p[i]);
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

template <typename T>
void sum_typed(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, double scale_d) {
  using A = acc_t<T>;
  const A scale = A(scale_d);
  const T* xp = x.data<T>();
  T* op = out.data<T>();
  if (inner == 1) {
    if (outer == 1 && n > kChunk) {
      const int64_t chunks = (n + kChunk - 1) / kChunk;
      std::vector<A> partial(static_cast<size_t>(chunks));
      parallel_for(0, chunks, 1, [&](int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) partial[size_t(c)] = row_sum(xp + c * kChunk, std::min(kChunk, n - c * kChunk));
      });
      A s = 0;
      for (A v : partial) s += v;
      op[0] = T(s * scale);
      return;
    }
    parallel_for(0, outer, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) op[o] = T(row_sum(xp + o * n, n) * scale);
    });
    return;
  }
  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  parallel_for(0, outer * blocks, 1, [&](int64_t b, int64_t e) {
    A acc[kInnerBlock];
    for (int64_t task = b; task < e; ++task) {
      const int64_t o = task / blocks, j0 = (task % blocks) * kInnerBlock;
      const int64_t w = std::min(kInnerBlock, inner - j0);
      std::fill(acc, acc + w, A(0));
      const T* base = xp + o * n * inner + j0;
      for (int64_t i = 0; i < n; ++i) {
        const T* row = base + i * inner;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) acc[j] += A(row[j]);
      }
      T* dst = op + o * inner + j0;
      for (int64_t j = 0; j < w; ++j) dst[j] = T(acc[j] * scale);
    }
  });
}

template <typename T>
void max_typed(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t outer, int64_t n, int64_t inner) {
  using A = acc_t<T>;
  const T* xp = x.data<T>();
  T* vp = values.data<T>();
  int64_t* ip = indices.data<int64_t>();
  parallel_for(0, outer * inner, std::max<int64_t>(1, 32768 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / inner, j = t % inner;
      const T* p = xp + o * n * inner + j;
      A best = A(p[0]);
      int64_t arg = 0;
      for (int64_t i = 1; i < n; ++i) {
        const A v = A(p[i * inner]);
        if (v > best || (v != v && best == best)) {  // NaN wins, like PyTorch
          best = v;
          arg = i;
        }
      }
      vp[t] = T(best);
      ip[t] = arg;
    }
  });
}

}  // namespace

// out (outer, inner) = sum over n of x (outer, n, inner), times `scale`.
void CpuKernels::sum(Stream&, const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner,
                     double scale) {
  dispatch_float(x.dtype(), "sum",
                 [&](auto tag) { sum_typed<typename decltype(tag)::type>(out, x, outer, n, inner, scale); });
}

// values/indices (outer, inner) = max and first argmax over n.
void CpuKernels::max(Stream&, const Tensor& values, const Tensor& indices, const Tensor& x, int64_t outer, int64_t n,
                     int64_t inner) {
  dispatch_float(x.dtype(), "max",
                 [&](auto tag) { max_typed<typename decltype(tag)::type>(values, indices, x, outer, n, inner); });
}

// grad_in (outer, n, inner), zero-filled by the caller: grad_in[o, idx[o, j], j] = g[o, j].
void CpuKernels::max_backward(Stream&, const Tensor& grad_in, const Tensor& g, const Tensor& indices, int64_t outer,
                              int64_t n, int64_t inner) {
  dispatch_float(g.dtype(), "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* gi = grad_in.data<T>();
    const T* gp = g.data<T>();
    const int64_t* ip = indices.data<int64_t>();
    parallel_for(0, outer * inner, 32768, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t o = t / inner, j = t % inner;
        gi[(o * n + ip[t]) * inner + j] = gp[t];
      }
    });
  });
}

}  // namespace tidal::cpu
