// The optimizer family's kernels: the f64 sum of squares of gradient clipping, in the CPU backend's
// order (one warp per chunk: lane k is the CPU's accumulator k), and the fused AdamW update.
#include <cstdint>

#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/optim_launch.h"

namespace tidal::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// Warp w of the grid sums chunk w: lane k adds the squares of elements k, k + 32, ... in order (the
// CPU's acc[k]), then acc[k] += acc[k + width] for width 16, 8, 4, 2, 1 (the CPU's tree).
template <class T>
__global__ void sum_of_squares_kernel(const T* x, int64_t n, int64_t chunk, int64_t chunks, double* partials) {
  const int lane = threadIdx.x & 31;
  const int64_t c = int64_t(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (c >= chunks) return;
  const int64_t begin = c * chunk, end = begin + chunk < n ? begin + chunk : n;
  double acc = 0;
  for (int64_t i = begin + lane; i < end; i += 32) {
    const double v = double(to_acc(x[i]));
    acc += v * v;
  }
  for (int width = 16; width >= 1; width >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, width);
  if (lane == 0) partials[c] = acc;
}

template <class P>
__global__ void adamw_kernel(P* p, const P* g, acc_t<P>* m, acc_t<P>* v, acc_t<P>* w, int64_t n, AdamWScalars sc) {
  using S = acc_t<P>;
  constexpr bool kMaster = std::is_same_v<P, bf16>;
  const S decay = S(sc.decay), b1 = S(sc.beta1), c1 = S(sc.one_minus_beta1), b2 = S(sc.beta2),
          c2 = S(sc.one_minus_beta2), step_size = S(sc.step_size), bc2_sqrt = S(sc.bc2_sqrt), eps = S(sc.eps);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const S gi = to_acc(g[i]);
    S x;
    if constexpr (kMaster)
      x = w[i];
    else
      x = p[i];
    x = x * decay;                              // param.mul_(1 - lr * wd)
    const S mi = m[i] * b1 + c1 * gi;           // exp_avg.mul_(b1).add_(g, alpha=1-b1)
    const S vi = v[i] * b2 + c2 * gi * gi;      // exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
    const S denom = sqrt(vi) / bc2_sqrt + eps;  // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
    x = x - step_size * mi / denom;             // param.addcdiv_(exp_avg, denom, value=-step_size)
    m[i] = mi;
    v[i] = vi;
    if constexpr (kMaster) {
      w[i] = x;
      p[i] = from_acc<P>(x);
    } else {
      p[i] = x;
    }
  }
}

}  // namespace

void launch_sum_of_squares(cudaStream_t stream, const void* x, DType dtype, int64_t n, int64_t chunk,
                           double* device_partials, double* partials) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (chunks == 0) return;
  const unsigned blocks = unsigned((chunks + kWarpsPerBlock - 1) / kWarpsPerBlock);
  TIDAL_CUDA_FLOATING(dtype, "sum_of_squares", T,
                      sum_of_squares_kernel<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(
                          static_cast<const T*>(x), n, chunk, chunks, device_partials);
                      TIDAL_CUDA_CHECK_LAUNCH());
  TIDAL_CUDA_CHECK(
      cudaMemcpyAsync(partials, device_partials, size_t(chunks) * sizeof(double), cudaMemcpyDeviceToHost, stream));
  TIDAL_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void launch_adamw(cudaStream_t stream, DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                  void* master, int64_t n, const AdamWScalars& s) {
  if (n == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "adamw", P, using S = acc_t<P>; adamw_kernel<P><<<grid_for(n), kThreads, 0, stream>>>(
                          static_cast<P*>(param), static_cast<const P*>(grad), static_cast<S*>(exp_avg),
                          static_cast<S*>(exp_avg_sq), static_cast<S*>(master), n, s);
                      TIDAL_CUDA_CHECK_LAUNCH());
}

}  // namespace tidal::cuda
