// Softmax and log_softmax over the middle dim of a contiguous (outer, n, inner) block, and the eager
// attention's scaled, causally masked softmax. A row (inner == 1) is one block: block_reduce's fixed
// tree gives its max and sums. inner > 1: one thread per (outer, inner) column, over n in order.
#include "tidal/backend/cuda/attention_mask.cuh"
#include "tidal/backend/cuda/block_reduce.cuh"
#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/softmax_launch.h"

namespace tidal::cuda {
namespace {

constexpr int kRowThreads = 256;

__device__ __forceinline__ float acc_exp(float x) { return expf(x); }
__device__ __forceinline__ double acc_exp(double x) { return exp(x); }
__device__ __forceinline__ float acc_log(float x) { return logf(x); }
__device__ __forceinline__ double acc_log(double x) { return log(x); }

template <class A>
__device__ __forceinline__ A neg_inf() {
  return -A(INFINITY);
}

// Max of row[0, n) (NaN skipped, as the CPU's row_max), after multiplying by `scale`.
template <class T, class A = acc_t<T>>
__device__ A row_max(const T* row, int64_t n, A scale) {
  A m = neg_inf<A>();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) m = MaxOp{}(m, to_acc(row[i]) * scale);
  return block_reduce(m, MaxOp{}, neg_inf<A>());
}

template <class T>
__global__ void softmax_rows_kernel(T* y, const T* x, int64_t n, bool log) {
  using A = acc_t<T>;
  const T* xr = x + int64_t(blockIdx.x) * n;
  T* yr = y + int64_t(blockIdx.x) * n;
  const A m = row_max(xr, n, A(1));
  A s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += acc_exp(to_acc(xr[i]) - m);
  s = block_sum(s);
  if (log) {
    const A lse = m + acc_log(s);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_acc<T>(to_acc(xr[i]) - lse);
  } else {
    const A inv = A(1) / s;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = from_acc<T>(acc_exp(to_acc(xr[i]) - m) * inv);
  }
}

template <class T>
__global__ void softmax_columns_kernel(T* y, const T* x, int64_t outer, int64_t n, int64_t inner, bool log) {
  using A = acc_t<T>;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < outer * inner;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    const T* xc = x + base;
    T* yc = y + base;
    A m = neg_inf<A>(), s = 0;
    for (int64_t i = 0; i < n; ++i) m = MaxOp{}(m, to_acc(xc[i * inner]));
    for (int64_t i = 0; i < n; ++i) s += acc_exp(to_acc(xc[i * inner]) - m);
    if (log) {
      const A lse = m + acc_log(s);
      for (int64_t i = 0; i < n; ++i) yc[i * inner] = from_acc<T>(to_acc(xc[i * inner]) - lse);
    } else {
      const A inv = A(1) / s;
      for (int64_t i = 0; i < n; ++i) yc[i * inner] = from_acc<T>(acc_exp(to_acc(xc[i * inner]) - m) * inv);
    }
  }
}

template <class T>
__global__ void softmax_backward_rows_kernel(T* dx, const T* g, const T* y, int64_t n, bool log) {
  using A = acc_t<T>;
  const int64_t off = int64_t(blockIdx.x) * n;
  const T* gr = g + off;
  const T* yr = y + off;
  T* dr = dx + off;
  A s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += log ? to_acc(gr[i]) : to_acc(gr[i]) * to_acc(yr[i]);
  s = block_sum(s);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const A gv = to_acc(gr[i]), yv = to_acc(yr[i]);
    dr[i] = from_acc<T>(log ? gv - acc_exp(yv) * s : yv * (gv - s));
  }
}

template <class T>
__global__ void softmax_backward_columns_kernel(T* dx, const T* g, const T* y, int64_t outer, int64_t n, int64_t inner,
                                                bool log) {
  using A = acc_t<T>;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < outer * inner;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    A s = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = base + i * inner;
      s += log ? to_acc(g[k]) : to_acc(g[k]) * to_acc(y[k]);
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = base + i * inner;
      const A gv = to_acc(g[k]), yv = to_acc(y[k]);
      dx[k] = from_acc<T>(log ? gv - acc_exp(yv) * s : yv * (gv - s));
    }
  }
}

template <class T>
__global__ void masked_softmax_kernel(T* probs, const T* scores, int64_t t_len, int64_t s_len, acc_t<T> scale,
                                      bool causal, int64_t window, DocSpan docs, int64_t rows_per_sample) {
  using A = acc_t<T>;
  const int64_t r = blockIdx.x;
  const T* x = scores + r * s_len;
  T* p = probs + r * s_len;
  // The visible keys [j0, j0 + n): the window's (or the document's) first key on, up to the diagonal.
  const KeySpan keys = visible_span(causal, window, 0, docs, r / rows_per_sample, r % t_len, t_len, s_len);
  const int64_t j0 = keys.first, n = keys.end - keys.first;
  const T* xv = x + j0;
  const A m = row_max(xv, n, scale);
  A s = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += acc_exp(to_acc(xv[j]) * scale - m);
  s = block_sum(s);
  const A inv = n > 0 ? A(1) / s : A(0);
  for (int64_t j = threadIdx.x; j < s_len; j += blockDim.x)
    p[j] = from_acc<T>(j >= j0 && j < j0 + n ? acc_exp(to_acc(x[j]) * scale - m) * inv : A(0));
}

template <class T>
__global__ void masked_softmax_backward_kernel(T* gx, const T* gp, const T* probs, int64_t s_len, acc_t<T> scale) {
  using A = acc_t<T>;
  const int64_t off = int64_t(blockIdx.x) * s_len;
  A dot = 0;
  for (int64_t j = threadIdx.x; j < s_len; j += blockDim.x) dot += to_acc(gp[off + j]) * to_acc(probs[off + j]);
  dot = block_sum(dot);
  for (int64_t j = threadIdx.x; j < s_len; j += blockDim.x)
    gx[off + j] = from_acc<T>(scale * to_acc(probs[off + j]) * (to_acc(gp[off + j]) - dot));
}

}  // namespace

void launch_softmax_forward(cudaStream_t stream, DType dtype, void* out, const void* x, int64_t outer, int64_t n,
                            int64_t inner, bool log) {
  if (outer * n * inner == 0) return;
  TIDAL_CUDA_FLOATING(dtype, log ? "log_softmax" : "softmax", T, {
    T* y = static_cast<T*>(out);
    const T* xp = static_cast<const T*>(x);
    if (inner == 1)
      softmax_rows_kernel<T><<<unsigned(outer), kRowThreads, 0, stream>>>(y, xp, n, log);
    else
      softmax_columns_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(y, xp, outer, n, inner, log);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

void launch_softmax_backward(cudaStream_t stream, DType dtype, void* dx, const void* g, const void* y, int64_t outer,
                             int64_t n, int64_t inner, bool log) {
  if (outer * n * inner == 0) return;
  TIDAL_CUDA_FLOATING(dtype, log ? "log_softmax" : "softmax", T, {
    T* d = static_cast<T*>(dx);
    const T* gp = static_cast<const T*>(g);
    const T* yp = static_cast<const T*>(y);
    if (inner == 1)
      softmax_backward_rows_kernel<T><<<unsigned(outer), kRowThreads, 0, stream>>>(d, gp, yp, n, log);
    else
      softmax_backward_columns_kernel<T>
          <<<grid_for(outer * inner), kThreads, 0, stream>>>(d, gp, yp, outer, n, inner, log);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

void launch_scaled_masked_softmax_forward(cudaStream_t stream, DType dtype, void* probs, const void* scores,
                                          int64_t rows, int64_t t_len, int64_t s_len, double scale, bool causal,
                                          int64_t window, const DocSpan& docs, int64_t rows_per_sample) {
  if (rows * s_len == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "scaled_masked_softmax", T, {
    masked_softmax_kernel<T>
        <<<unsigned(rows), kRowThreads, 0, stream>>>(static_cast<T*>(probs), static_cast<const T*>(scores), t_len,
                                                     s_len, acc_t<T>(scale), causal, window, docs, rows_per_sample);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

void launch_scaled_masked_softmax_backward(cudaStream_t stream, DType dtype, void* grad_scores, const void* grad_probs,
                                           const void* probs, int64_t rows, int64_t s_len, double scale) {
  if (rows * s_len == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "scaled_masked_softmax", T, {
    masked_softmax_backward_kernel<T>
        <<<unsigned(rows), kRowThreads, 0, stream>>>(static_cast<T*>(grad_scores), static_cast<const T*>(grad_probs),
                                                     static_cast<const T*>(probs), s_len, acc_t<T>(scale));
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tidal::cuda
