// The optimizer family's kernels: the f64 sum of squares of gradient clipping, in the CPU backend's
// order (one warp per chunk: lane k is the CPU's accumulator k), and the fused AdamW update, per
// tensor and over many tensors per launch.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/elementwise_loops.cuh"
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

// The scalars of one tensor's update in its state type S (rounded from the host's doubles).
template <class S>
struct AdamWConsts {
  S decay, b1, c1, b2, c2, step_size, bc2_sqrt, eps;
};

template <class S>
__device__ __forceinline__ AdamWConsts<S> adamw_consts(double decay, double step_size, double bc2_sqrt,
                                                       const AdamWScalars& sc) {
  return {S(decay),    S(sc.beta1), S(sc.one_minus_beta1), S(sc.beta2), S(sc.one_minus_beta2), S(step_size),
          S(bc2_sqrt), S(sc.eps)};
}

// Unfused arithmetic, correctly rounded one operation at a time: nvcc would otherwise contract a * b + c
// into an FMA wherever its optimizer sees fit after inlining, differently in the per-tensor and the
// multi-tensor kernels (seen on an H200: f64 params one ulp apart), and unlike the CPU (ISO C++ mode:
// no contraction).
__device__ __forceinline__ float rn_mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double rn_mul(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float rn_add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double rn_add(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float rn_sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double rn_sub(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float rn_div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double rn_div(double a, double b) { return __ddiv_rn(a, b); }
__device__ __forceinline__ float rn_sqrt(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ double rn_sqrt(double a) { return __dsqrt_rn(a); }

// One element's update, torch.optim.AdamW's order of operations: the one piece of code both the
// per-tensor and the multi-tensor kernels run, so their bits agree. Returns the new param value.
template <class S>
__device__ __forceinline__ S adamw_element(S x, S gi, S& m, S& v, const AdamWConsts<S>& c) {
  x = rn_mul(x, c.decay);                                              // param.mul_(1 - lr * wd)
  const S mi = rn_add(rn_mul(m, c.b1), rn_mul(c.c1, gi));              // exp_avg.mul_(b1).add_(g, alpha=1-b1)
  const S vi = rn_add(rn_mul(v, c.b2), rn_mul(rn_mul(c.c2, gi), gi));  // exp_avg_sq.mul_(b2).addcmul_(g, g, 1-b2)
  const S denom = rn_add(rn_div(rn_sqrt(vi), c.bc2_sqrt), c.eps);      // (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
  m = mi;
  v = vi;
  return rn_sub(x, rn_div(rn_mul(c.step_size, mi), denom));  // param.addcdiv_(exp_avg, denom, value=-step_size)
}

// Element i of one tensor: P the param's storage type, G the gradient's. A bf16 param is updated
// through its f32 master w and written back rounded to nearest even: by __float2bfloat16_rn when the
// gradient is bf16 (the fused bf16 pass), by the copy kernel's conversion when it is f32 (--bf16: the
// per-tensor path updates the master, then copies it).
template <class P, class G>
__device__ __forceinline__ void adamw_at(int64_t i, P* p, const G* g, acc_t<P>* m, acc_t<P>* v, acc_t<P>* w,
                                         const AdamWConsts<acc_t<P>>& c) {
  using S = acc_t<P>;
  constexpr bool kMaster = std::is_same_v<P, bf16>;
  S mi = m[i], vi = v[i];
  S x;
  if constexpr (kMaster)
    x = w[i];
  else
    x = p[i];
  x = adamw_element<S>(x, to_acc(g[i]), mi, vi, c);
  m[i] = mi;
  v[i] = vi;
  if constexpr (kMaster) {
    w[i] = x;
    if constexpr (std::is_same_v<G, float>)
      p[i] = bf16_rne(x);
    else
      p[i] = from_acc<P>(x);
  } else {
    p[i] = x;
  }
}

template <class P>
__global__ void adamw_kernel(P* p, const P* g, acc_t<P>* m, acc_t<P>* v, acc_t<P>* w, int64_t n, AdamWScalars sc) {
  const AdamWConsts<acc_t<P>> c = adamw_consts<acc_t<P>>(sc.decay, sc.step_size, sc.bc2_sqrt, sc);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    adamw_at<P, P>(i, p, g, m, v, w, c);
}

// The table of one multi-tensor launch, passed by value (kernel parameters: under 4 KiB). The scalars
// that differ between tensors (the step count, the weight decay) are per tensor; the rest shared.
struct AdamWTable {
  void* p[kAdamWTensorsPerLaunch];
  const void* g[kAdamWTensorsPerLaunch];
  void* m[kAdamWTensorsPerLaunch];
  void* v[kAdamWTensorsPerLaunch];
  void* w[kAdamWTensorsPerLaunch];
  int64_t n[kAdamWTensorsPerLaunch];
  double decay[kAdamWTensorsPerLaunch], step_size[kAdamWTensorsPerLaunch], bc2_sqrt[kAdamWTensorsPerLaunch];
  AdamWScalars shared;  // beta1, beta2, eps and their complements
  int32_t block_chunk[kAdamWBlocksPerLaunch];
  uint8_t block_tensor[kAdamWBlocksPerLaunch];
};
static_assert(sizeof(AdamWTable) <= 4096, "the multi-tensor AdamW table must fit the classic kernel parameter limit");

constexpr int kMultiThreads = 512;

// Block b updates chunk block_chunk[b] of tensor block_tensor[b].
template <class P, class G>
__global__ void __launch_bounds__(kMultiThreads) adamw_multi_kernel(AdamWTable tab) {
  using S = acc_t<P>;
  const int t = tab.block_tensor[blockIdx.x];
  const int64_t begin = int64_t(tab.block_chunk[blockIdx.x]) * kAdamWChunk;
  const int64_t end = begin + kAdamWChunk < tab.n[t] ? begin + kAdamWChunk : tab.n[t];
  const AdamWConsts<S> c = adamw_consts<S>(tab.decay[t], tab.step_size[t], tab.bc2_sqrt[t], tab.shared);
  P* p = static_cast<P*>(tab.p[t]);
  const G* g = static_cast<const G*>(tab.g[t]);
  S* m = static_cast<S*>(tab.m[t]);
  S* v = static_cast<S*>(tab.v[t]);
  S* w = static_cast<S*>(tab.w[t]);
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) adamw_at<P, G>(i, p, g, m, v, w, c);
}

bool same_shared(const AdamWScalars& a, const AdamWScalars& b) {
  return a.beta1 == b.beta1 && a.one_minus_beta1 == b.one_minus_beta1 && a.beta2 == b.beta2 &&
         a.one_minus_beta2 == b.one_minus_beta2 && a.eps == b.eps;
}

// Packs the jobs into tables and launches each full one (and the last).
template <class P, class G>
void run_multi(cudaStream_t stream, const std::vector<AdamWTensorJob>& jobs) {
  AdamWTable tab{};
  int tensors = 0, blocks = 0;
  auto flush = [&] {
    if (blocks > 0) {
      adamw_multi_kernel<P, G><<<unsigned(blocks), kMultiThreads, 0, stream>>>(tab);
      TIDAL_CUDA_CHECK_LAUNCH();
    }
    tensors = blocks = 0;
  };
  for (const AdamWTensorJob& j : jobs) {
    if (j.n == 0) continue;
    if (tensors > 0 && !same_shared(tab.shared, j.s)) flush();
    const int64_t chunks = (j.n + kAdamWChunk - 1) / kAdamWChunk;
    int slot = -1;  // j's place in the current table
    for (int64_t c = 0; c < chunks; ++c) {
      if (blocks == kAdamWBlocksPerLaunch) {
        flush();
        slot = -1;
      }
      if (slot < 0) {
        if (tensors == kAdamWTensorsPerLaunch) flush();
        if (tensors == 0) tab.shared = j.s;
        slot = tensors++;
        tab.p[slot] = j.param;
        tab.g[slot] = j.grad;
        tab.m[slot] = j.exp_avg;
        tab.v[slot] = j.exp_avg_sq;
        tab.w[slot] = j.master;
        tab.n[slot] = j.n;
        tab.decay[slot] = j.s.decay;
        tab.step_size[slot] = j.s.step_size;
        tab.bc2_sqrt[slot] = j.s.bc2_sqrt;
      }
      tab.block_tensor[blocks] = uint8_t(slot);
      tab.block_chunk[blocks] = int32_t(c);
      ++blocks;
    }
  }
  flush();
}

// The row pointers of one add_rows launch (kernel parameter: 512 bytes).
struct RowTable {
  const void* row[kAddRowsPerLaunch];
  int count;
};

template <class T>
__global__ void add_rows_kernel(T* dst, RowTable tab, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    T acc = dst[i];
    for (int r = 0; r < tab.count; ++r)  // rounded after every add, as one add kernel per row rounds
      acc = from_acc<T>(to_acc<T>(acc) + to_acc<T>(static_cast<const T*>(tab.row[r])[i]));
    dst[i] = acc;
  }
}

}  // namespace

void launch_add_rows(cudaStream_t stream, DType dtype, void* dst, const std::vector<const void*>& rows, int64_t n) {
  if (n == 0) return;
  for (size_t first = 0; first < rows.size(); first += kAddRowsPerLaunch) {
    RowTable tab{};
    tab.count = int(std::min<size_t>(kAddRowsPerLaunch, rows.size() - first));
    for (int r = 0; r < tab.count; ++r) tab.row[r] = rows[first + size_t(r)];
    TIDAL_CUDA_FLOATING(dtype, "add_rows_inplace", T,
                        add_rows_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(dst), tab, n);
                        TIDAL_CUDA_CHECK_LAUNCH());
  }
}

void launch_sum_of_squares(cudaStream_t stream, const void* x, DType dtype, int64_t n, int64_t chunk,
                           double* device_partials) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (chunks == 0) return;
  const unsigned blocks = unsigned((chunks + kWarpsPerBlock - 1) / kWarpsPerBlock);
  TIDAL_CUDA_FLOATING(dtype, "sum_of_squares", T,
                      sum_of_squares_kernel<T><<<blocks, 32 * kWarpsPerBlock, 0, stream>>>(
                          static_cast<const T*>(x), n, chunk, chunks, device_partials);
                      TIDAL_CUDA_CHECK_LAUNCH());
}

void launch_adamw(cudaStream_t stream, DType dtype, void* param, const void* grad, void* exp_avg, void* exp_avg_sq,
                  void* master, int64_t n, const AdamWScalars& s) {
  if (n == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "adamw", P, using S = acc_t<P>; adamw_kernel<P><<<grid_for(n), kThreads, 0, stream>>>(
                          static_cast<P*>(param), static_cast<const P*>(grad), static_cast<S*>(exp_avg),
                          static_cast<S*>(exp_avg_sq), static_cast<S*>(master), n, s);
                      TIDAL_CUDA_CHECK_LAUNCH());
}

void launch_adamw_multi(cudaStream_t stream, AdamWForm form, const std::vector<AdamWTensorJob>& jobs) {
  switch (form) {
    case AdamWForm::f32: return run_multi<float, float>(stream, jobs);
    case AdamWForm::f64: return run_multi<double, double>(stream, jobs);
    case AdamWForm::bf16: return run_multi<bf16, bf16>(stream, jobs);
    case AdamWForm::bf16_f32_grad: return run_multi<bf16, float>(stream, jobs);
  }
}

}  // namespace tidal::cuda
