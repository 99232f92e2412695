// Layer norm and RMS norm over the rows of contiguous (rows, cols) inputs: one block per row, its sums
// by block_reduce's fixed tree. Note [Deterministic parameter gradients] (backend/cpu/norm.cpp):
// dweight/dbias are summed by fixed row chunks, thread c of chunk k adding its chunk's rows in order
// into workspace row k, then a second pass adds the chunk rows in chunk order. No atomics.
#include "tidal/backend/cuda/block_reduce.cuh"
#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/norm_launch.h"

namespace tidal::cuda {
namespace {

constexpr int kRowThreads = 256;

__device__ __forceinline__ float acc_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double acc_sqrt(double x) { return sqrt(x); }

// A parameter element in the accumulate type, or 1 (weight) / 0 (bias) when undefined.
template <class T>
__device__ __forceinline__ acc_t<T> param(const T* p, int64_t c, acc_t<T> absent) {
  return p ? to_acc(p[c]) : absent;
}

template <class T>
__global__ void layer_norm_forward_kernel(T* y, acc_t<T>* mean, acc_t<T>* rstd, const T* x, const T* w, const T* b,
                                          int64_t C, acc_t<T> eps) {
  using A = acc_t<T>;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  T* yr = y + r * C;
  const A inv_c = A(1) / A(C);
  A s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += to_acc(xr[c]);
  const A mu = block_sum(s) * inv_c;
  A v = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A d = to_acc(xr[c]) - mu;
    v += d * d;
  }
  const A rs = A(1) / acc_sqrt(block_sum(v) * inv_c + eps);
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    A out = (to_acc(xr[c]) - mu) * rs;
    if (w) out *= to_acc(w[c]);
    if (b) out += to_acc(b[c]);
    yr[c] = from_acc<T>(out);
  }
}

template <class T>
__global__ void rms_norm_forward_kernel(T* y, acc_t<T>* rstd, const T* x, const T* w, int64_t C, acc_t<T> eps,
                                        acc_t<T> offset) {
  using A = acc_t<T>;
  const int64_t r = blockIdx.x;
  const T* xr = x + r * C;
  T* yr = y + r * C;
  A s = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A v = to_acc(xr[c]);
    s += v * v;
  }
  const A rs = A(1) / acc_sqrt(block_sum(s) * (A(1) / A(C)) + eps);
  if (threadIdx.x == 0) rstd[r] = rs;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    if (offset != A(0)) {  // Gemma: times (offset + w) in A, rounded once
      yr[c] = from_acc<T>(to_acc(xr[c]) * rs * (offset + to_acc(w[c])));
      continue;
    }
    const T n = from_acc<T>(to_acc(xr[c]) * rs);  // rounded to T before the weight, as the CPU
    yr[c] = w ? from_acc<T>(to_acc(n) * to_acc(w[c])) : n;
  }
}

// dx of one row per block. Layer norm (mean given): dx = rs * (dy - mean(dy) - xhat * mean(dy * xhat));
// RMS norm (mean == nullptr): dx = rs * (dy - x * rs * mean(dy * x * rs)); dy = g * (offset + weight).
template <class T>
__global__ void norm_dx_kernel(T* dx, const T* g, const T* x, const acc_t<T>* mean, const acc_t<T>* rstd, const T* w,
                               int64_t C, acc_t<T> offset) {
  using A = acc_t<T>;
  const int64_t r = blockIdx.x;
  const T* gr = g + r * C;
  const T* xr = x + r * C;
  T* dr = dx + r * C;
  const A mu = mean ? mean[r] : A(0), rs = rstd[r], inv_c = A(1) / A(C);
  A s1 = 0, s2 = 0;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A dy = to_acc(gr[c]) * (offset + param(w, c, A(1)));
    s1 += dy;
    s2 += dy * ((to_acc(xr[c]) - mu) * rs);
  }
  const A m2 = block_sum(s2) * inv_c;
  const A m1 = mean ? block_sum(s1) * inv_c : A(0);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    const A dy = to_acc(gr[c]) * (offset + param(w, c, A(1)));
    dr[c] = from_acc<T>(rs * (dy - m1 - (to_acc(xr[c]) - mu) * rs * m2));
  }
}

// Workspace row k (slots x C): partial sums over chunk k's rows of g * xhat (and g when slots == 2).
template <class T>
__global__ void norm_partials_kernel(acc_t<T>* ws, int slots, const T* g, const T* x, const acc_t<T>* mean,
                                     const acc_t<T>* rstd, int64_t rows, int64_t C, int64_t per) {
  using A = acc_t<T>;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t k = blockIdx.y, r1 = (k + 1) * per < rows ? (k + 1) * per : rows;
  A pw = 0, pb = 0;
  for (int64_t r = k * per; r < r1; ++r) {
    const A gv = to_acc(g[r * C + c]);
    pw += gv * ((to_acc(x[r * C + c]) - (mean ? mean[r] : A(0))) * rstd[r]);
    pb += gv;
  }
  A* row = ws + k * slots * C;
  row[c] = pw;
  if (slots == 2) row[C + c] = pb;
}

// out[c] = sum over chunks k, in order, of ws[k * stride + c].
template <class T>
__global__ void combine_chunks_kernel(T* out, const acc_t<T>* ws, int64_t chunks, int64_t stride, int64_t C) {
  using A = acc_t<T>;
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  A acc = 0;
  for (int64_t k = 0; k < chunks; ++k) acc += ws[k * stride + c];
  out[c] = from_acc<T>(acc);
}

// The backward of either norm: dx by rows, then the parameter grads by chunks.
template <class T>
void norm_backward(cudaStream_t stream, const NormShape& s, T* dx, T* dweight, T* dbias, acc_t<T>* ws, const T* g,
                   const T* x, const acc_t<T>* mean, const acc_t<T>* rstd, const T* w) {
  if (dx) {
    norm_dx_kernel<T>
        <<<unsigned(s.rows), kRowThreads, 0, stream>>>(dx, g, x, mean, rstd, w, s.cols, acc_t<T>(s.weight_offset));
    TIDAL_CUDA_CHECK_LAUNCH();
  }
  if (!dweight && !dbias) return;
  const int slots = mean ? 2 : 1;
  const int64_t per = (s.rows + s.chunks - 1) / s.chunks;
  const unsigned col_blocks = unsigned((s.cols + kThreads - 1) / kThreads);
  norm_partials_kernel<T>
      <<<dim3(col_blocks, unsigned(s.chunks)), kThreads, 0, stream>>>(ws, slots, g, x, mean, rstd, s.rows, s.cols, per);
  TIDAL_CUDA_CHECK_LAUNCH();
  if (dweight) {
    combine_chunks_kernel<T><<<col_blocks, kThreads, 0, stream>>>(dweight, ws, s.chunks, slots * s.cols, s.cols);
    TIDAL_CUDA_CHECK_LAUNCH();
  }
  if (dbias) {
    combine_chunks_kernel<T><<<col_blocks, kThreads, 0, stream>>>(dbias, ws + s.cols, s.chunks, slots * s.cols, s.cols);
    TIDAL_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void launch_layer_norm_forward(cudaStream_t stream, const NormShape& s, double eps, void* out, void* mean, void* rstd,
                               const void* x, const void* weight, const void* bias) {
  if (s.rows == 0 || s.cols == 0) return;
  TIDAL_CUDA_FLOATING(s.dtype, "layer_norm", T, {
    using A = acc_t<T>;
    layer_norm_forward_kernel<T><<<unsigned(s.rows), kRowThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<A*>(mean), static_cast<A*>(rstd), static_cast<const T*>(x),
        static_cast<const T*>(weight), static_cast<const T*>(bias), s.cols, A(eps));
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

void launch_layer_norm_backward(cudaStream_t stream, const NormShape& s, void* dx, void* dweight, void* dbias,
                                void* workspace, const void* g, const void* x, const void* mean, const void* rstd,
                                const void* weight) {
  if (s.rows == 0 || s.cols == 0) return;
  TIDAL_CUDA_FLOATING(s.dtype, "layer_norm", T, {
    using A = acc_t<T>;
    norm_backward<T>(stream, s, static_cast<T*>(dx), static_cast<T*>(dweight), static_cast<T*>(dbias),
                     static_cast<A*>(workspace), static_cast<const T*>(g), static_cast<const T*>(x),
                     static_cast<const A*>(mean), static_cast<const A*>(rstd), static_cast<const T*>(weight));
  });
}

void launch_rms_norm_forward(cudaStream_t stream, const NormShape& s, double eps, void* out, void* rstd, const void* x,
                             const void* weight) {
  if (s.rows == 0 || s.cols == 0) return;
  TIDAL_CUDA_FLOATING(s.dtype, "rms_norm", T, {
    using A = acc_t<T>;
    rms_norm_forward_kernel<T><<<unsigned(s.rows), kRowThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<A*>(rstd), static_cast<const T*>(x), static_cast<const T*>(weight), s.cols,
        A(eps), A(s.weight_offset));
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

void launch_rms_norm_backward(cudaStream_t stream, const NormShape& s, void* dx, void* dweight, void* workspace,
                              const void* g, const void* x, const void* rstd, const void* weight) {
  if (s.rows == 0 || s.cols == 0) return;
  TIDAL_CUDA_FLOATING(s.dtype, "rms_norm", T, {
    using A = acc_t<T>;
    norm_backward<T>(stream, s, static_cast<T*>(dx), static_cast<T*>(dweight), nullptr, static_cast<A*>(workspace),
                     static_cast<const T*>(g), static_cast<const T*>(x), nullptr, static_cast<const A*>(rstd),
                     static_cast<const T*>(weight));
  });
}

}  // namespace tidal::cuda
