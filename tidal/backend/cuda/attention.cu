// The attention family's kernels: the row softmax of the eager flash attention (forward and
// backward, causal, sliding-window and compressed-key masks, with tidal's Philox dropout), rowsum(dout * out) less the
// log-sum-exp's gradient, and the strided copy and scale the attention and matmul kernels use. Reductions run a fixed
// tree per block: no atomics.
#include <cmath>

#include "tidal/backend/cuda/attention_launch.h"
#include "tidal/backend/cuda/attention_mask.cuh"
#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/philox.cuh"

namespace tidal::cuda {
namespace {

__device__ __forceinline__ float exp_acc(float x) { return expf(x); }
__device__ __forceinline__ double exp_acc(double x) { return exp(x); }
__device__ __forceinline__ float log_acc(float x) { return logf(x); }
__device__ __forceinline__ double log_acc(double x) { return log(x); }

// The block's reduction of v (max or sum) in a fixed tree; every thread gets the result.
template <bool kMax, class A>
__device__ A block_reduce(A v, A* shared) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? (w > v ? w : v) : v + w;
  }
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x) / 32 ? shared[lane] : (kMax ? -INFINITY : A(0));
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      const A w = __shfl_xor_sync(0xffffffffu, v, o);
      v = kMax ? (w > v ? w : v) : v + w;
    }
    if (lane == 0) shared[32] = v;
  }
  __syncthreads();
  const A r = shared[32];
  __syncthreads();  // shared is reused by the next reduction
  return r;
}

__device__ __forceinline__ uint64_t rng_pos(const FlashRows& a, int64_t gi, int64_t i, int64_t j) {
  return a.rng_start + uint64_t(((a.b * a.hq + a.h0 + gi) * a.rng_rows + i) * a.rng_cols + j);
}

template <class A>
__global__ void softmax_forward_kernel(FlashRows a) {
  __shared__ A shared[33];
  const int64_t row = blockIdx.x, gi = row / a.rows, i = a.row0 + row % a.rows, n = a.s_len;
  const KeySpan keys =
      visible_span(a.key_rate, a.causal, a.window, a.diagonal, a.docs, a.b, i, a.t, n);  // keys [j0, nv) visible
  const int64_t j0 = keys.first, nv = keys.end;
  A* s = static_cast<A*>(a.s) + row * n;
  bf16* p16 = a.p16 ? static_cast<bf16*>(a.p16) + row * n : nullptr;
  A* lse = static_cast<A*>(a.lse) + gi * a.t + i;
  if (j0 == nv) {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      s[j] = A(0);
      if (p16) p16[j] = __float2bfloat16_rn(0.0f);
    }
    if (threadIdx.x == 0) *lse = A(INFINITY);
    return;
  }
  A mx = -INFINITY;
  for (int64_t j = j0 + threadIdx.x; j < nv; j += blockDim.x) mx = s[j] > mx ? s[j] : mx;
  mx = block_reduce<true>(mx, shared);
  A sum = 0;
  for (int64_t j = j0 + threadIdx.x; j < nv; j += blockDim.x) sum += exp_acc(s[j] - mx);
  sum = block_reduce<false>(sum, shared);
  if (threadIdx.x == 0) *lse = mx + log_acc(sum);
  const A inv = A(1) / sum, keep_scale = A(1.0 / (1.0 - a.dropout_p));
  const float p_drop = float(a.dropout_p);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const bool seen = j >= j0 && j < nv;
    A p = seen ? exp_acc(s[j] - mx) * inv : A(0);
    if (a.dropout_p > 0 && seen) p *= philox_uniform(a.seed, rng_pos(a, gi, i, j)) >= p_drop ? keep_scale : A(0);
    s[j] = p;
    if (p16) p16[j] = __float2bfloat16_rn(float(p));
  }
}

template <class A>
__global__ void softmax_backward_kernel(FlashRows a) {
  const int64_t row = blockIdx.x, gi = row / a.rows, i = a.row0 + row % a.rows, n = a.s_len;
  const KeySpan keys =
      visible_span(a.key_rate, a.causal, a.window, a.diagonal, a.docs, a.b, i, a.t, n);  // keys [j0, nv) visible
  const int64_t j0 = keys.first, nv = keys.end;
  A* s = static_cast<A*>(a.s) + row * n;
  A* dp = static_cast<A*>(a.dp) + row * n;
  bf16* p16 = a.p16 ? static_cast<bf16*>(a.p16) + row * n : nullptr;
  bf16* ds16 = a.ds16 ? static_cast<bf16*>(a.ds16) + row * n : nullptr;
  const A lse = static_cast<const A*>(a.lse)[gi * a.t + i], delta = static_cast<const A*>(a.delta)[gi * a.t + i];
  const A keep_scale = A(1.0 / (1.0 - a.dropout_p));
  const float p_drop = float(a.dropout_p);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    A p = 0, ds = 0;
    if (j >= j0 && j < nv) {
      const A e = exp_acc(s[j] - lse);
      A z = A(1);
      if (a.dropout_p > 0) z = philox_uniform(a.seed, rng_pos(a, gi, i, j)) >= p_drop ? keep_scale : A(0);
      p = e * z;
      ds = e * (dp[j] * z - delta);
    }
    s[j] = p;
    dp[j] = ds;
    if (p16) p16[j] = __float2bfloat16_rn(float(p));
    if (ds16) ds16[j] = __float2bfloat16_rn(float(ds));
  }
}

// One warp per row.
template <class T>
__global__ void row_dot_kernel(View4 dout, View4 out, const acc_t<T>* dlse, acc_t<T>* delta, int64_t rows, int64_t hq,
                               int64_t t, int64_t dv) {
  using A = acc_t<T>;
  const int64_t r = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (r >= rows) return;
  const int64_t b = r / (hq * t), h = (r / t) % hq, i = r % t;
  const T* g = static_cast<const T*>(dout.p) + b * dout.s[0] + h * dout.s[1] + i * dout.s[2];
  const T* o = static_cast<const T*>(out.p) + b * out.s[0] + h * out.s[1] + i * out.s[2];
  A acc = 0;
  for (int64_t c = lane; c < dv; c += 32) acc += to_acc(g[c * dout.s[3]]) * to_acc(o[c * out.s[3]]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (lane == 0) delta[r] = dlse != nullptr ? acc - dlse[r] : acc;
}

template <class T>
__global__ void scale_kernel(Strided x, int64_t n, double factor) {
  using A = acc_t<T>;
  T* p = static_cast<T*>(x.data);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = x.offset(i);
    p[o] = from_acc<T>(to_acc(p[o]) * A(factor));
  }
}

}  // namespace

void launch_scale(cudaStream_t stream, const Strided& x, int64_t n, double factor) {
  if (n == 0) return;
  TIDAL_CUDA_FLOATING(x.dtype, "scale", T, scale_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(x, n, factor));
  TIDAL_CUDA_CHECK_LAUNCH();
}

void launch_flash_row_dot(cudaStream_t stream, DType dtype, const View4& dout, const View4& out, const void* dlse,
                          void* delta, int64_t rows, int64_t hq, int64_t t, int64_t dv) {
  if (rows == 0) return;
  const unsigned blocks = unsigned((rows + kThreads / 32 - 1) / (kThreads / 32));
  TIDAL_CUDA_FLOATING(dtype, "flash_row_dot", T,
                      row_dot_kernel<T>
                      <<<blocks, kThreads, 0, stream>>>(dout, out, static_cast<const acc_t<T>*>(dlse),
                                                        static_cast<acc_t<T>*>(delta), rows, hq, t, dv));
  TIDAL_CUDA_CHECK_LAUNCH();
}

void launch_flash_softmax_forward(cudaStream_t stream, const FlashRows& a) {
  const int64_t rows = a.g * a.rows;
  if (rows == 0) return;
  if (a.dtype == DType::f64)
    softmax_forward_kernel<double><<<unsigned(rows), kThreads, 0, stream>>>(a);
  else
    softmax_forward_kernel<float><<<unsigned(rows), kThreads, 0, stream>>>(a);
  TIDAL_CUDA_CHECK_LAUNCH();
}

void launch_flash_softmax_backward(cudaStream_t stream, const FlashRows& a) {
  const int64_t rows = a.g * a.rows;
  if (rows == 0) return;
  if (a.dtype == DType::f64)
    softmax_backward_kernel<double><<<unsigned(rows), kThreads, 0, stream>>>(a);
  else
    softmax_backward_kernel<float><<<unsigned(rows), kThreads, 0, stream>>>(a);
  TIDAL_CUDA_CHECK_LAUNCH();
}

}  // namespace tidal::cuda
