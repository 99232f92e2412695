// The loss family's kernels: one block per row of logits (block max, then the exp sum, both with a
// fixed reduction tree, so every run gives the same bits), the CPU backend's exp polynomial for f32.
#include <cstdint>
#include <limits>
#include <vector>

#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/elementwise_loops.cuh"  // fast_exp: the CPU backend's f32 exp
#include "tidal/backend/cuda/loss_launch.h"

namespace tidal::cuda {
namespace {

constexpr int kRowThreads = 256;

// Block-wide reductions of kRowThreads threads; every thread gets the result. `sh`: 32 entries.
template <class A>
__device__ A block_sum(A v, A* sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x >> 5) ? sh[lane] : A(0);
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  const A r = sh[0];
  __syncthreads();
  return r;
}
template <class A>
__device__ A block_max(A v, A* sh) {  // no NaN reaches it (row_max skips them)
  for (int o = 16; o > 0; o >>= 1) {
    const A w = __shfl_xor_sync(0xffffffffu, v, o);
    v = w > v ? w : v;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x >> 5) ? sh[lane] : -std::numeric_limits<A>::infinity();
    for (int o = 16; o > 0; o >>= 1) {
      const A w = __shfl_xor_sync(0xffffffffu, v, o);
      v = w > v ? w : v;
    }
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  const A r = sh[0];
  __syncthreads();
  return r;
}

// log Σ exp(x[0, n)) of one row, by the whole block (softmax.h row_logsumexp: NaNs skipped by the
// max, they reach the result through the sum).
template <class T>
__device__ acc_t<T> row_lse(const T* x, int64_t n, acc_t<T>* sh) {
  using A = acc_t<T>;
  A m = -std::numeric_limits<A>::infinity();
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const A v = to_acc(x[j]);
    m = v > m ? v : m;
  }
  m = block_max(m, sh);
  A s = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += fast_exp(to_acc(x[j]) - m);
  s = block_sum(s, sh);
  return m + log(s);
}

template <class T, class I>
__global__ void ce_forward_kernel(acc_t<T>* loss, acc_t<T>* lse, const T* x, const I* t, int64_t vocab,
                                  int64_t row_stride, int64_t ignore) {
  using A = acc_t<T>;
  __shared__ A sh[32];
  const int64_t r = blockIdx.x, target = int64_t(t[r]);
  if (target == ignore) {
    if (threadIdx.x == 0) loss[r] = lse[r] = A(0);
    return;
  }
  const T* xr = x + r * row_stride;
  const A l = row_lse(xr, vocab, sh);
  if (threadIdx.x == 0) {
    lse[r] = l;
    loss[r] = l - to_acc(xr[target]);
  }
}

template <class T, class I>
__global__ void ce_backward_kernel(T* d, const T* x, const acc_t<T>* lse, const I* t, const T* rg, double scale,
                                   int64_t vocab, int64_t row_stride, int64_t ignore) {
  using A = acc_t<T>;
  const int64_t r = blockIdx.x, target = int64_t(t[r]);
  T* dr = d + r * vocab;
  if (target == ignore) {
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) dr[j] = from_acc<T>(A(0));
    return;
  }
  const T* xr = x + r * row_stride;
  const A l = lse[r], s = A(rg != nullptr ? scale * double(to_acc(rg[r])) : scale);
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const A e = fast_exp(to_acc(xr[j]) - l);
    dr[j] = from_acc<T>(j == target ? (e - A(1)) * s : e * s);
  }
}

template <class A, class I>
__global__ void rows_inplace_kernel(A* x, const I* t, A* loss, int64_t vocab, int64_t ignore, A s, bool grad) {
  __shared__ A sh[32];
  const int64_t r = blockIdx.x, target = int64_t(t[r]);
  A* xr = x + r * vocab;
  if (target == ignore) {
    if (threadIdx.x == 0) loss[r] = A(0);
    if (grad)
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) xr[j] = A(0);
    return;
  }
  const A xt = xr[target];             // read before any thread writes the row
  const A l = row_lse(xr, vocab, sh);  // ends with a barrier: every read of the row is done
  if (threadIdx.x == 0) loss[r] = l - xt;
  if (!grad) return;
  for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
    const A e = fast_exp(xr[j] - l);
    xr[j] = j == target ? (e - A(1)) * s : e * s;
  }
}

template <class I>
__global__ void find_bad_kernel(const I* t, int64_t rows, int64_t vocab, int64_t ignore, int64_t* first) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = int64_t(t[r]);
    if (v != ignore && (v < 0 || v >= vocab))
      atomicMin(reinterpret_cast<unsigned long long*>(first), static_cast<unsigned long long>(r));
  }
}

template <class I>
__global__ void count_kernel(const I* t, int64_t rows, int64_t ignore, int64_t* count) {
  unsigned long long c = 0;
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x)
    c += int64_t(t[r]) != ignore;
  for (int o = 16; o > 0; o >>= 1) c += __shfl_down_sync(0xffffffffu, c, o);
  if ((threadIdx.x & 31) == 0 && c != 0) atomicAdd(reinterpret_cast<unsigned long long*>(count), c);
}

int64_t read_back(cudaStream_t stream, const int64_t* scratch) {
  int64_t v = 0;
  TIDAL_CUDA_CHECK(cudaMemcpyAsync(&v, scratch, sizeof(v), cudaMemcpyDeviceToHost, stream));
  TIDAL_CUDA_CHECK(cudaStreamSynchronize(stream));
  return v;
}

// Calls f(I{}) with I the targets' element type.
template <class F>
void dispatch_targets(DType tdt, const char* kernel, F&& f) {
  switch (tdt) {
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    default: unsupported_dtype(kernel, tdt);
  }
}

}  // namespace

int64_t launch_find_bad_target(cudaStream_t stream, const void* targets, DType tdt, int64_t rows, int64_t vocab,
                               int64_t ignore, int64_t* scratch) {
  if (rows == 0) return -1;
  TIDAL_CUDA_CHECK(cudaMemsetAsync(scratch, 0x7f, sizeof(int64_t), stream));
  dispatch_targets(tdt, "find_bad_target", [&](auto tag) {
    using I = decltype(tag);
    find_bad_kernel<I>
        <<<grid_for(rows), kThreads, 0, stream>>>(static_cast<const I*>(targets), rows, vocab, ignore, scratch);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
  const int64_t first = read_back(stream, scratch);
  return first < rows ? first : -1;
}

int64_t launch_count_not_ignored(cudaStream_t stream, const void* targets, DType tdt, int64_t rows, int64_t ignore,
                                 int64_t* scratch) {
  if (rows == 0) return 0;
  TIDAL_CUDA_CHECK(cudaMemsetAsync(scratch, 0, sizeof(int64_t), stream));
  dispatch_targets(tdt, "count_not_ignored", [&](auto tag) {
    using I = decltype(tag);
    count_kernel<I><<<grid_for(rows), kThreads, 0, stream>>>(static_cast<const I*>(targets), rows, ignore, scratch);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
  return read_back(stream, scratch);
}

void launch_cross_entropy_forward(cudaStream_t stream, void* loss, void* lse, const void* logits, DType ldt,
                                  const void* targets, DType tdt, int64_t rows, int64_t vocab, int64_t row_stride,
                                  int64_t ignore) {
  if (rows == 0) return;
  TIDAL_CUDA_FLOATING(ldt, "cross_entropy", T, dispatch_targets(tdt, "cross_entropy", [&](auto tag) {
                        using I = decltype(tag);
                        using A = acc_t<T>;
                        ce_forward_kernel<T, I><<<unsigned(rows), kRowThreads, 0, stream>>>(
                            static_cast<A*>(loss), static_cast<A*>(lse), static_cast<const T*>(logits),
                            static_cast<const I*>(targets), vocab, row_stride, ignore);
                        TIDAL_CUDA_CHECK_LAUNCH();
                      }));
}

void launch_cross_entropy_backward(cudaStream_t stream, void* dlogits, const void* logits, DType ldt, const void* lse,
                                   const void* targets, DType tdt, const void* row_grad, double scale, int64_t rows,
                                   int64_t vocab, int64_t row_stride, int64_t ignore) {
  if (rows == 0) return;
  TIDAL_CUDA_FLOATING(ldt, "cross_entropy", T, dispatch_targets(tdt, "cross_entropy", [&](auto tag) {
                        using I = decltype(tag);
                        ce_backward_kernel<T, I><<<unsigned(rows), kRowThreads, 0, stream>>>(
                            static_cast<T*>(dlogits), static_cast<const T*>(logits), static_cast<const acc_t<T>*>(lse),
                            static_cast<const I*>(targets), static_cast<const T*>(row_grad), scale, vocab, row_stride,
                            ignore);
                        TIDAL_CUDA_CHECK_LAUNCH();
                      }));
}

void launch_loss_rows_inplace(cudaStream_t stream, void* x, DType dt, const void* targets, DType tdt, void* loss,
                              int64_t rows, int64_t vocab, int64_t ignore, double s, bool grad) {
  if (rows == 0) return;
  auto run = [&](auto atag) {
    using A = decltype(atag);
    dispatch_targets(tdt, "chunked_lm_loss", [&](auto tag) {
      using I = decltype(tag);
      rows_inplace_kernel<A, I><<<unsigned(rows), kRowThreads, 0, stream>>>(
          static_cast<A*>(x), static_cast<const I*>(targets), static_cast<A*>(loss), vocab, ignore, A(s), grad);
      TIDAL_CUDA_CHECK_LAUNCH();
    });
  };
  switch (dt) {
    case DType::f32: return run(float{});
    case DType::f64: return run(double{});
    default: unsupported_dtype("chunked_lm_loss", dt);
  }
}

double sum_rows_in_order(cudaStream_t stream, const void* loss, DType acc, int64_t rows) {
  if (rows == 0) return 0.0;
  double sum = 0;
  auto add = [&](auto tag) {
    using A = decltype(tag);
    std::vector<A> host(static_cast<size_t>(rows));
    TIDAL_CUDA_CHECK(cudaMemcpyAsync(host.data(), loss, size_t(rows) * sizeof(A), cudaMemcpyDeviceToHost, stream));
    TIDAL_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (const A v : host) sum += double(v);  // ignored rows hold 0: adding them changes nothing
  };
  switch (acc) {
    case DType::f32: add(float{}); break;
    case DType::f64: add(double{}); break;
    default: unsupported_dtype("cross_entropy sum", acc);
  }
  return sum;
}

}  // namespace tidal::cuda
