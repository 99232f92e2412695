// Attention over per-query kept keys (ops/sparse_attention.h; DeepSeek-V4's compressed sparse attention): query row
// (b, i) attends, in every head, to the k keys kept[b, i, :] of its sample (-1: an empty slot). The CPU's math
// (backend/cpu/sparse_attention.cpp): scores scale * q . key in the accumulate type, their maximum, P = exp(s - max)
// by the CPU's exp, sums and products over the slots in slot order. One block per (b, i, h) row: each warp scores
// slots (a dot product over the head dim, lane-strided and summed by a butterfly, so every lane holds the same
// bits), then each thread owns output columns and adds the slots in order. The backward writes each row's P and
// dS = P (dP - delta) to the workspace with dq, then one block per (b, kv head, key) sums dk and dv over the slots
// that read the key, in the order of the inverted index the host built (row order, the group's heads in order):
// no two blocks write one key, no atomics, and the order depends on nothing but the inputs.
#include <cmath>

#include "tidal/backend/cuda/block_reduce.cuh"
#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/elementwise_loops.cuh"
#include "tidal/backend/cuda/shared_memory.h"
#include "tidal/backend/cuda/sparse_attention_launch.h"

namespace tidal::cuda {
namespace {

constexpr int kRowThreads = 128;
constexpr int kRowWarps = kRowThreads / 32;
constexpr int kKeyThreads = 128;

__device__ __forceinline__ float log_acc(float x) { return logf(x); }
__device__ __forceinline__ double log_acc(double x) { return log(x); }

template <class A>
__device__ __forceinline__ A neg_inf() {
  return -A(INFINITY);
}

template <class T>
__device__ __forceinline__ const T* row_of(const SparseView& v, int64_t b, int64_t h, int64_t l) {
  return static_cast<const T*>(v.p) + b * v.s[0] + h * v.s[1] + l * v.s[2];
}
template <class T>
__device__ __forceinline__ T* out_row(const SparseView& v, int64_t b, int64_t h, int64_t l) {
  return static_cast<T*>(v.p) + b * v.s[0] + h * v.s[1] + l * v.s[2];
}

// sum_c x[c] y[c] over n, by the warp: lane-strided partial sums, then a butterfly (every lane the same bits).
template <class T, class A = acc_t<T>>
__device__ __forceinline__ A warp_dot(const T* x, int64_t sx, const T* y, int64_t sy, int64_t n, int lane) {
  A acc = 0;
  for (int64_t c = lane; c < n; c += 32) acc += to_acc(x[c * sx]) * to_acc(y[c * sy]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  return acc;
}

// sum_j w[j] rows[slots[j]][c] over the kept slots in slot order (the CPU's order), in the accumulate type: a row's
// output column from P and the values, or its dq column from dS and the keys.
template <class T, class A>
__device__ __forceinline__ A slot_sum(const A* w, const int32_t* slots, int64_t k, const SparseView& rows, int64_t b,
                                      int64_t kh, int64_t c) {
  A acc = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t key = slots[j];
    if (key < 0) continue;
    acc += w[j] * to_acc(row_of<T>(rows, b, kh, key)[c * rows.s[3]]);
  }
  return acc;
}

// Block row = (b*T + i)*Hq + h: the heads of one query row are neighbours (they read the same keys).
struct Row {
  int64_t h, r, b, i, kh;
  __device__ explicit Row(const SparseDims& n) {
    const int64_t row = blockIdx.x;
    h = row % n.hq;
    r = row / n.hq;
    b = r / n.t;
    i = r % n.t;
    kh = h / (n.hq / n.hkv);
  }
};

template <class T>
__global__ void forward_kernel(SparseDims n, acc_t<T> scale, SparseView out, acc_t<T>* lse, SparseView q,
                               SparseView keys, SparseView values, const int32_t* kept) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  A* s = reinterpret_cast<A*>(shared_raw);  // the row's k scores, then its probabilities
  const Row at(n);
  const int32_t* slots = kept + at.r * n.k;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const T* qr = row_of<T>(q, at.b, at.h, at.i);
  for (int64_t j = warp; j < n.k; j += kRowWarps) {
    const int32_t key = slots[j];  // one slot per warp: the branch is the warp's
    const A v = key < 0 ? neg_inf<A>()
                        : scale * warp_dot<T>(qr, q.s[3], row_of<T>(keys, at.b, at.kh, key), keys.s[3], n.d, lane);
    if (lane == 0) s[j] = v;
  }
  __syncthreads();
  A m = neg_inf<A>();
  for (int64_t j = threadIdx.x; j < n.k; j += blockDim.x) m = MaxOp{}(m, s[j]);
  m = block_reduce(m, MaxOp{}, neg_inf<A>());
  T* o = out_row<T>(out, at.b, at.h, at.i);
  A* l = lse + (at.b * n.hq + at.h) * n.t + at.i;
  if (m == neg_inf<A>()) {  // no key kept: out 0, lse -inf (it weighs 0 when merged)
    for (int64_t c = threadIdx.x; c < n.dv; c += blockDim.x) o[c * out.s[3]] = from_acc<T>(A(0));
    if (threadIdx.x == 0) *l = m;
    return;
  }
  for (int64_t j = threadIdx.x; j < n.k; j += blockDim.x) s[j] = slots[j] < 0 ? A(0) : fast_exp(s[j] - m);
  __syncthreads();
  A sum = 0;  // every thread adds the kept slots in order: the CPU's sum
  for (int64_t j = 0; j < n.k; ++j)
    if (slots[j] >= 0) sum += s[j];
  for (int64_t c = threadIdx.x; c < n.dv; c += blockDim.x)
    o[c * out.s[3]] = from_acc<T>(slot_sum<T>(s, slots, n.k, values, at.b, at.kh, c) / sum);
  if (threadIdx.x == 0) *l = m + log_acc(sum);
}

template <class T>
__global__ void backward_rows_kernel(SparseDims n, acc_t<T> scale, SparseView dq, acc_t<T>* prob, acc_t<T>* dscore,
                                     SparseView dout, const acc_t<T>* dlse, SparseView q, SparseView keys,
                                     SparseView values, const int32_t* kept, SparseView out, const acc_t<T>* lse) {
  using A = acc_t<T>;
  __shared__ A delta_shared;
  const Row at(n);
  const int32_t* slots = kept + at.r * n.k;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int64_t lrow = (at.b * n.hq + at.h) * n.t + at.i;
  const T* g = row_of<T>(dout, at.b, at.h, at.i);
  if (warp == 0) {
    // delta = rowsum(dO * O) - dlse: the softmax backward's row term with the log-sum-exp's gradient.
    const A dot = warp_dot<T>(g, dout.s[3], row_of<T>(out, at.b, at.h, at.i), out.s[3], n.dv, lane);
    if (lane == 0) delta_shared = dot - (dlse != nullptr ? dlse[lrow] : A(0));
  }
  __syncthreads();
  const A delta = delta_shared, row_lse = lse[lrow];
  const T* qr = row_of<T>(q, at.b, at.h, at.i);
  A* p = prob + (at.r * n.hq + at.h) * n.k;
  A* ds = dscore + (at.r * n.hq + at.h) * n.k;
  for (int64_t j = warp; j < n.k; j += kRowWarps) {
    const int32_t key = slots[j];
    if (key < 0) {
      if (lane == 0) p[j] = ds[j] = A(0);
      continue;
    }
    const A sc = scale * warp_dot<T>(qr, q.s[3], row_of<T>(keys, at.b, at.kh, key), keys.s[3], n.d, lane);
    const A dp = warp_dot<T>(g, dout.s[3], row_of<T>(values, at.b, at.kh, key), values.s[3], n.dv, lane);
    const A e = fast_exp(sc - row_lse);
    if (lane == 0) {
      p[j] = e;
      ds[j] = e * (dp - delta);
    }
  }
  if (dq.p == nullptr) return;
  __syncthreads();  // the block's dS writes are visible to all its threads
  T* o = out_row<T>(dq, at.b, at.h, at.i);
  for (int64_t c = threadIdx.x; c < n.d; c += blockDim.x)
    o[c * dq.s[3]] = from_acc<T>(scale * slot_sum<T>(ds, slots, n.k, keys, at.b, at.kh, c));
}

// (b, key) of the inverted index's entry `at`: the slot r * k + j = pairs[at] is of sample r / T and reads kept[slot].
__device__ __forceinline__ int64_t pair_code(const SparseDims& n, const int32_t* kept, const int64_t* pairs,
                                             int64_t at) {
  const int64_t slot = pairs[at];
  return (slot / (n.t * n.k)) * n.w + kept[slot];
}

// The first entry of pairs[0, count) whose code is >= code (codes never decrease).
__device__ int64_t first_pair_from(const SparseDims& n, const int32_t* kept, const int64_t* pairs, int64_t count,
                                   int64_t code) {
  int64_t lo = 0, hi = count;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (pair_code(n, kept, pairs, mid) < code)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

template <class T>
__global__ void backward_keys_kernel(SparseDims n, acc_t<T> scale, SparseView dk, SparseView dv, const acc_t<T>* prob,
                                     const acc_t<T>* dscore, SparseView q, SparseView dout, const int32_t* kept,
                                     const int64_t* pairs, int64_t count) {
  using A = acc_t<T>;
  const int64_t e = blockIdx.x, key = e % n.w, kh = (e / n.w) % n.hkv, b = e / (n.w * n.hkv);
  const int64_t g = n.hq / n.hkv, code = b * n.w + key;
  const int64_t first = first_pair_from(n, kept, pairs, count, code);
  const int64_t end = first_pair_from(n, kept, pairs, count, code + 1);
  const int64_t cols = n.d > n.dv ? n.d : n.dv;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    A gk = 0, gv = 0;
    for (int64_t at = first; at < end; ++at) {
      const int64_t slot = pairs[at], r = slot / n.k, j = slot % n.k, i = r % n.t;
      for (int64_t h = kh * g; h < (kh + 1) * g; ++h) {
        const int64_t sh = (r * n.hq + h) * n.k + j;
        if (c < n.d) gk += dscore[sh] * to_acc(row_of<T>(q, b, h, i)[c * q.s[3]]);
        if (c < n.dv) gv += prob[sh] * to_acc(row_of<T>(dout, b, h, i)[c * dout.s[3]]);
      }
    }
    if (dk.p != nullptr && c < n.d) out_row<T>(dk, b, kh, key)[c * dk.s[3]] = from_acc<T>(scale * gk);
    if (dv.p != nullptr && c < n.dv) out_row<T>(dv, b, kh, key)[c * dv.s[3]] = from_acc<T>(gv);
  }
}

}  // namespace

void launch_sparse_attention_forward(cudaStream_t stream, DType dtype, const SparseDims& n, double scale,
                                     const SparseView& out, void* lse, const SparseView& q, const SparseView& keys,
                                     const SparseView& values, const int32_t* kept) {
  const int64_t rows = n.b * n.t * n.hq;
  if (rows == 0) return;
  const int64_t bytes = sparse_attention_forward_shared_bytes(dtype, n.k);
  TIDAL_CUDA_FLOATING(dtype, "sparse_attention", T, {
    allow_shared_bytes(forward_kernel<T>, bytes, kSparseStaticSharedBytes);
    forward_kernel<T><<<unsigned(rows), kRowThreads, size_t(bytes), stream>>>(
        n, acc_t<T>(scale), out, static_cast<acc_t<T>*>(lse), q, keys, values, kept);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

void launch_sparse_attention_backward_rows(cudaStream_t stream, DType dtype, const SparseDims& n, double scale,
                                           const SparseView& dq, void* prob, void* dscore, const SparseView& dout,
                                           const void* dlse, const SparseView& q, const SparseView& keys,
                                           const SparseView& values, const int32_t* kept, const SparseView& out,
                                           const void* lse) {
  const int64_t rows = n.b * n.t * n.hq;
  if (rows == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "sparse_attention_backward", T, {
    using A = acc_t<T>;
    backward_rows_kernel<T><<<unsigned(rows), kRowThreads, 0, stream>>>(
        n, A(scale), dq, static_cast<A*>(prob), static_cast<A*>(dscore), dout, static_cast<const A*>(dlse), q, keys,
        values, kept, out, static_cast<const A*>(lse));
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

void launch_sparse_attention_backward_keys(cudaStream_t stream, DType dtype, const SparseDims& n, double scale,
                                           const SparseView& dk, const SparseView& dv, const void* prob,
                                           const void* dscore, const SparseView& q, const SparseView& dout,
                                           const int32_t* kept, const int64_t* pairs, int64_t count) {
  const int64_t blocks = n.b * n.hkv * n.w;
  if (blocks == 0 || (dk.p == nullptr && dv.p == nullptr)) return;
  TIDAL_CUDA_FLOATING(dtype, "sparse_attention_backward", T, {
    using A = acc_t<T>;
    backward_keys_kernel<T><<<unsigned(blocks), kKeyThreads, 0, stream>>>(
        n, A(scale), dk, dv, static_cast<const A*>(prob), static_cast<const A*>(dscore), q, dout, kept, pairs, count);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tidal::cuda
