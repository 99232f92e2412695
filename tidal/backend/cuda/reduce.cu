// Sum and max over the middle dim of a contiguous (outer, n, inner) block. inner == 1: one block per
// row, each thread folding a strided slice in order, then block_reduce's fixed tree; inner > 1: one
// thread per (outer, inner) column, adding its n values in order (the CPU's order there).
#include "tidal/backend/cuda/block_reduce.cuh"
#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/reduce_launch.h"

namespace tidal::cuda {
namespace {

constexpr int kRowThreads = 256;

template <class T>
__global__ void sum_rows_kernel(T* out, const T* x, int64_t n, acc_t<T> scale) {
  using A = acc_t<T>;
  const T* row = x + int64_t(blockIdx.x) * n;
  A s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += to_acc(row[i]);
  s = block_sum(s);
  if (threadIdx.x == 0) out[blockIdx.x] = from_acc<T>(s * scale);
}

// Column sums of (outer, n, inner) over n. A block is 32 columns by kColumnPhases row phases: thread
// (tx, ty) sums rows ty, ty + kColumnPhases, ... of column tx in order (loads coalesced along the
// columns), then row phase 0 adds the phases' sums in phase order: a fixed order, so the same bits on
// every run, with kColumnPhases times the parallelism of a thread per column (a bias gradient of 768
// columns over 8192 rows ran on 768 threads, each adding 8192 values one after the other).
constexpr int kColumnPhases = 32;

template <class T>
__global__ void __launch_bounds__(32 * kColumnPhases)
    sum_columns_kernel(T* out, const T* x, int64_t outer, int64_t n, int64_t inner, acc_t<T> scale) {
  using A = acc_t<T>;
  __shared__ A part[kColumnPhases][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t j = int64_t(blockIdx.x) * 32 + tx;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    A s = 0;
    if (j < inner) {
      const T* p = x + o * n * inner + j;
#pragma unroll 4
      for (int64_t i = ty; i < n; i += kColumnPhases) s += to_acc(p[i * inner]);
    }
    part[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && j < inner) {
      A t = 0;
      for (int k = 0; k < kColumnPhases; ++k) t += part[k][tx];
      out[o * inner + j] = from_acc<T>(t * scale);
    }
    __syncthreads();
  }
}

// The CPU's rule as a total order: a NaN beats a number, a larger value beats a smaller, and between
// equals (or two NaNs) the smaller index wins, which is the first argmax of a sequential scan.
template <class A>
__device__ __forceinline__ bool beats(A v, int64_t i, A best, int64_t arg) {
  const bool v_nan = v != v, b_nan = best != best;
  if (v_nan != b_nan) return v_nan;
  if (!v_nan && v != best) return v > best;
  return i < arg;
}

template <class T>
__global__ void max_rows_kernel(T* values, int64_t* indices, const T* x, int64_t n) {
  using A = acc_t<T>;
  __shared__ A best_v[32];
  __shared__ int64_t best_i[32];
  const T* row = x + int64_t(blockIdx.x) * n;
  A best = to_acc(row[0]);  // every thread starts from element 0: a valid candidate
  int64_t arg = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const A v = to_acc(row[i]);
    if (beats(v, i, best, arg)) {
      best = v;
      arg = i;
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const A v = __shfl_down_sync(0xffffffffu, best, offset);
    const int64_t i = __shfl_down_sync(0xffffffffu, arg, offset);
    if (beats(v, i, best, arg)) {
      best = v;
      arg = i;
    }
  }
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  if (lane == 0) {
    best_v[warp] = best;
    best_i[warp] = arg;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < int(blockDim.x >> 5); ++w)
      if (beats(best_v[w], best_i[w], best, arg)) {
        best = best_v[w];
        arg = best_i[w];
      }
    values[blockIdx.x] = from_acc<T>(best);
    indices[blockIdx.x] = arg;
  }
}

template <class T>
__global__ void max_columns_kernel(T* values, int64_t* indices, const T* x, int64_t outer, int64_t n, int64_t inner) {
  using A = acc_t<T>;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < outer * inner;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, j = t % inner;
    const T* p = x + o * n * inner + j;
    A best = to_acc(p[0]);
    int64_t arg = 0;
    for (int64_t i = 1; i < n; ++i) {
      const A v = to_acc(p[i * inner]);
      if (v > best || (v != v && best == best)) {  // NaN wins, like PyTorch
        best = v;
        arg = i;
      }
    }
    values[t] = from_acc<T>(best);
    indices[t] = arg;
  }
}

template <class T>
__global__ void max_backward_kernel(T* grad_in, const T* g, const int64_t* indices, int64_t outer, int64_t n,
                                    int64_t inner) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < outer * inner;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, j = t % inner;
    grad_in[(o * n + indices[t]) * inner + j] = g[t];
  }
}

}  // namespace

void launch_sum(cudaStream_t stream, DType dtype, void* out, const void* x, int64_t outer, int64_t n, int64_t inner,
                double scale) {
  if (outer * inner == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "sum", T, {
    using A = acc_t<T>;
    if (inner == 1)
      sum_rows_kernel<T>
          <<<unsigned(outer), kRowThreads, 0, stream>>>(static_cast<T*>(out), static_cast<const T*>(x), n, A(scale));
    else
      sum_columns_kernel<T>
          <<<dim3(unsigned((inner + 31) / 32), unsigned(outer < 65535 ? outer : 65535)), dim3(32, kColumnPhases), 0,
             stream>>>(static_cast<T*>(out), static_cast<const T*>(x), outer, n, inner, A(scale));
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

void launch_max(cudaStream_t stream, DType dtype, void* values, int64_t* indices, const void* x, int64_t outer,
                int64_t n, int64_t inner) {
  if (outer * inner == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "max", T, {
    if (inner == 1)
      max_rows_kernel<T>
          <<<unsigned(outer), kRowThreads, 0, stream>>>(static_cast<T*>(values), indices, static_cast<const T*>(x), n);
    else
      max_columns_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(
          static_cast<T*>(values), indices, static_cast<const T*>(x), outer, n, inner);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

void launch_max_backward(cudaStream_t stream, DType dtype, void* grad_in, const void* g, const int64_t* indices,
                         int64_t outer, int64_t n, int64_t inner) {
  if (outer * inner == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "max", T, {
    max_backward_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(
        static_cast<T*>(grad_in), static_cast<const T*>(g), indices, outer, n, inner);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tidal::cuda
