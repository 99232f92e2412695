#include "tidal/backend/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "tidal/backend/cpu/kernels.h"
#include "tidal/base/parallel.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/tensor.h"

namespace tidal::cpu {
namespace {

constexpr int64_t kGrainElems = 16384;
// Inner columns handled together when inner > 1: whole rows of up to this many columns, so each of
// the n rows is read as one contiguous run (short runs at a power-of-two stride thrash the caches).
constexpr int64_t kInnerBlock = 1024;

int64_t grain_for(int64_t elems_per_task) {
  return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(elems_per_task, 1));
}

template <typename T>
void softmax_rows(T* y, const T* x, const SoftmaxArgs& a) {
  using A = acc_t<T>;
  const int64_t n = a.n;
  parallel_for(0, a.outer, grain_for(n), [&](int64_t b, int64_t e) {
    std::vector<A> buf(std::is_same_v<T, A> ? 0 : size_t(n));  // bf16: the row in f32
    for (int64_t r = b; r < e; ++r) {
      const A* xr = acc_row(x + r * n, n, buf.data());
      T* yr = y + r * n;
      const A m = row_max(xr, n);
      if (a.log) {
        const A lse = m + std::log(row_sum_exp(xr, n, m));
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) yr[i] = store_as<T>(xr[i] - lse);
        continue;
      }
      // exp(x - m) is kept (in y for f32/f64, over the f32 row for bf16), then scaled: one exp each.
      A* ex;
      if constexpr (std::is_same_v<T, A>)
        ex = yr;
      else
        ex = buf.data();
      A s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) {
        ex[i] = fast_exp(xr[i] - m);
        s += ex[i];
      }
      const A inv = A(1) / s;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) yr[i] = store_as<T>(ex[i] * inv);
    }
  });
}

// inner > 1: per (outer index, block of inner columns), reduce over n with one accumulator per column.
template <typename T>
void softmax_strided(T* y, const T* x, const SoftmaxArgs& a) {
  using A = acc_t<T>;
  const int64_t n = a.n, inner = a.inner, blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  parallel_for(0, a.outer * blocks, grain_for(n * kInnerBlock), [&](int64_t b, int64_t e) {
    A mx[kInnerBlock], sm[kInnerBlock];
    for (int64_t task = b; task < e; ++task) {
      const int64_t o = task / blocks, j0 = (task % blocks) * kInnerBlock, w = std::min(kInnerBlock, inner - j0);
      const T* xb = x + o * n * inner + j0;
      T* yb = y + o * n * inner + j0;
      std::fill(mx, mx + w, -std::numeric_limits<A>::infinity());
      std::fill(sm, sm + w, A(0));
      for (int64_t i = 0; i < n; ++i) {
        const T* xr = xb + i * inner;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) mx[j] = A(xr[j]) > mx[j] ? A(xr[j]) : mx[j];
      }
      for (int64_t i = 0; i < n; ++i) {
        const T* xr = xb + i * inner;
#pragma omp simd
        for (int64_t j = 0; j < w; ++j) sm[j] += fast_exp(A(xr[j]) - mx[j]);
      }
      if (a.log) {
        for (int64_t j = 0; j < w; ++j) mx[j] += std::log(sm[j]);  // now the log-sum-exp
      } else {
        for (int64_t j = 0; j < w; ++j) sm[j] = A(1) / sm[j];
      }
      for (int64_t i = 0; i < n; ++i) {
        const T* xr = xb + i * inner;
        T* yr = yb + i * inner;
        if (a.log) {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) yr[j] = store_as<T>(A(xr[j]) - mx[j]);
        } else {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) yr[j] = store_as<T>(fast_exp(A(xr[j]) - mx[j]) * sm[j]);
        }
      }
    }
  });
}

template <typename T>
void softmax_backward_rows(T* dx, const T* g, const T* y, const SoftmaxArgs& a) {
  using A = acc_t<T>;
  const int64_t n = a.n;
  parallel_for(0, a.outer, grain_for(n), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* gr = g + r * n;
      const T* yr = y + r * n;
      T* dr = dx + r * n;
      A s = 0;
      if (a.log) {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) s += A(gr[i]);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) dr[i] = store_as<T>(A(gr[i]) - fast_exp(A(yr[i])) * s);
      } else {
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < n; ++i) s += A(gr[i]) * A(yr[i]);
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) dr[i] = store_as<T>(A(yr[i]) * (A(gr[i]) - s));
      }
    }
  });
}

template <typename T>
void softmax_backward_strided(T* dx, const T* g, const T* y, const SoftmaxArgs& a) {
  using A = acc_t<T>;
  const int64_t n = a.n, inner = a.inner, blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  parallel_for(0, a.outer * blocks, grain_for(n * kInnerBlock), [&](int64_t b, int64_t e) {
    A s[kInnerBlock];
    for (int64_t task = b; task < e; ++task) {
      const int64_t o = task / blocks, j0 = (task % blocks) * kInnerBlock, w = std::min(kInnerBlock, inner - j0);
      const int64_t base = o * n * inner + j0;
      std::fill(s, s + w, A(0));
      for (int64_t i = 0; i < n; ++i) {
        const T* gr = g + base + i * inner;
        const T* yr = y + base + i * inner;
        if (a.log) {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) s[j] += A(gr[j]);
        } else {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) s[j] += A(gr[j]) * A(yr[j]);
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        const T* gr = g + base + i * inner;
        const T* yr = y + base + i * inner;
        T* dr = dx + base + i * inner;
        if (a.log) {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) dr[j] = store_as<T>(A(gr[j]) - fast_exp(A(yr[j])) * s[j]);
        } else {
#pragma omp simd
          for (int64_t j = 0; j < w; ++j) dr[j] = store_as<T>(A(yr[j]) * (A(gr[j]) - s[j]));
        }
      }
    }
  });
}

}  // namespace

// out = softmax(x) (or log_softmax), max-subtracted; x and out contiguous, same dtype.
void CpuKernels::softmax_forward(Stream&, const Tensor& out, const Tensor& x, const SoftmaxArgs& a) {
  dispatch_float(x.dtype(), a.log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.inner == 1)
      softmax_rows(out.data<T>(), x.data<T>(), a);
    else
      softmax_strided(out.data<T>(), x.data<T>(), a);
  });
}

// From the output y: softmax dx = y * (g - sum(g * y)); log_softmax dx = g - exp(y) * sum(g).
void CpuKernels::softmax_backward(Stream&, const Tensor& dx, const Tensor& g, const Tensor& y, const SoftmaxArgs& a) {
  dispatch_float(y.dtype(), a.log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (a.inner == 1)
      softmax_backward_rows(dx.data<T>(), g.data<T>(), y.data<T>(), a);
    else
      softmax_backward_strided(dx.data<T>(), g.data<T>(), y.data<T>(), a);
  });
}

}  // namespace tidal::cpu
