// The Sinkhorn-Knopp projection (ops/sinkhorn.h; DeepSeek-V4's mHC residual mapping) of many small matrices
// (n = hc_mult = 4): a block holds whole matrices, one thread per entry, each matrix's entries in shared memory.
// Step k divides every entry by (eps + the sum along its column for even k, its row for odd k), the sum added in
// the CPU's order (backend/cpu/sinkhorn.cpp: eps first, then the entries by increasing index) and every operation
// correctly rounded on its own (no contraction, as the CPU's ISO C++), so f32 and f64 give the CPU's bits. The
// backward recomputes the 2 * iters - 1 steps of its matrix, keeping each step's output and divisors in shared
// memory, and runs them in reverse: for y = v / s, dv = (g - sum(g * y) along the step's axis) / s.
#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/shared_memory.h"
#include "tidal/backend/cuda/sinkhorn_launch.h"

namespace tidal::cuda {
namespace {

constexpr int kBlockThreads = 256;

__device__ __forceinline__ float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ double add_rn(double a, double b) { return __dadd_rn(a, b); }
__device__ __forceinline__ float sub_rn(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ double sub_rn(double a, double b) { return __dsub_rn(a, b); }
__device__ __forceinline__ float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ __forceinline__ float div_rn(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ double div_rn(double a, double b) { return __ddiv_rn(a, b); }

// Step k normalizes columns when even, rows when odd (the CPU's step_is_column).
__device__ __forceinline__ bool step_is_column(int64_t k) { return k % 2 == 0; }

// Entry t of the line through (r, c) that step's sums run along: column c's row t, or row r's column t.
__device__ __forceinline__ int line_entry(bool column, int n, int r, int c, int t) {
  return column ? t * n + c : r * n + t;
}

// eps + the n entries of v on the line through (r, c), in index order.
template <class A>
__device__ __forceinline__ A line_sum(const A* v, bool column, int n, int r, int c, A eps) {
  A s = eps;
  for (int t = 0; t < n; ++t) s = add_rn(s, v[line_entry(column, n, r, c, t)]);
  return s;
}

// Where a block's threads are: `per_block` matrices of n * n threads each.
struct Entry {
  int local, e, r, c;
  int64_t m;
  bool live;
  __device__ Entry(const SinkhornArgs& a, int per_block) {
    const int n = int(a.n), nn = n * n;
    local = int(threadIdx.x) / nn;
    e = int(threadIdx.x) % nn;
    r = e / n;
    c = e % n;
    m = int64_t(blockIdx.x) * per_block + local;
    live = m < a.matrices;
  }
};

template <class T>
__global__ void sinkhorn_forward_kernel(T* out, const T* x, SinkhornArgs a, int per_block) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const Entry p(a, per_block);
  const int n = int(a.n), nn = n * n;
  A* v = reinterpret_cast<A*>(shared_raw) + p.local * nn;
  const A eps = A(a.eps);
  A mine = p.live ? to_acc(x[p.m * nn + p.e]) : A(1);
  for (int64_t k = 0; k < 2 * a.iters - 1; ++k) {
    v[p.e] = mine;
    __syncthreads();
    const A s = line_sum(v, step_is_column(k), n, p.r, p.c, eps);
    __syncthreads();  // every sum has read v before the next step writes it
    mine = div_rn(mine, s);
  }
  if (p.live) out[p.m * nn + p.e] = from_acc<T>(mine);
}

template <class T>
__global__ void sinkhorn_backward_kernel(T* dx, const T* g, const T* x, SinkhornArgs a, int per_block) {
  using A = acc_t<T>;
  extern __shared__ __align__(16) unsigned char shared_raw[];
  const Entry p(a, per_block);
  const int n = int(a.n), nn = n * n;
  const int64_t steps = 2 * a.iters - 1;
  // This matrix's shared memory: outs[k] (n * n) the output of step k, divs[k] (n) its divisors, grad (n * n).
  A* outs = reinterpret_cast<A*>(shared_raw) + p.local * (steps * (nn + n) + nn);
  A* divs = outs + steps * nn;
  A* grad = divs + steps * n;
  const A eps = A(a.eps);
  A mine = p.live ? to_acc(x[p.m * nn + p.e]) : A(1);
  for (int64_t k = 0; k < steps; ++k) {
    const bool column = step_is_column(k);
    A* v = outs + k * nn;
    v[p.e] = mine;  // the step's input, overwritten by its output below
    __syncthreads();
    const A s = line_sum(v, column, n, p.r, p.c, eps);
    __syncthreads();
    mine = div_rn(mine, s);
    v[p.e] = mine;
    if (column ? p.r == 0 : p.c == 0) divs[k * n + (column ? p.c : p.r)] = s;
  }
  A gr = p.live ? to_acc(g[p.m * nn + p.e]) : A(0);
  for (int64_t k = steps - 1; k >= 0; --k) {
    const bool column = step_is_column(k);
    const A* y = outs + k * nn;
    grad[p.e] = gr;
    __syncthreads();  // also orders the recompute's last writes before these reads
    A dot = 0;
    for (int t = 0; t < n; ++t) {
      const int at = line_entry(column, n, p.r, p.c, t);
      dot = add_rn(dot, mul_rn(grad[at], y[at]));
    }
    __syncthreads();  // every dot has read grad before the next step writes it
    gr = div_rn(sub_rn(gr, dot), divs[k * n + (column ? p.c : p.r)]);
  }
  if (p.live) dx[p.m * nn + p.e] = from_acc<T>(gr);
}

// Matrices per block: up to kBlockThreads threads, and the shared memory within the default 48 KiB (one matrix
// when it needs more alone: the launcher opts in).
int matrices_per_block(int64_t nn, int64_t matrix_bytes) {
  int64_t per = kBlockThreads / nn;
  if (per * matrix_bytes > kDefaultSharedBytes) per = kDefaultSharedBytes / matrix_bytes;
  return int(per < 1 ? 1 : per);
}

unsigned blocks_for(int64_t matrices, int per_block) { return unsigned((matrices + per_block - 1) / per_block); }

}  // namespace

void launch_sinkhorn_forward(cudaStream_t stream, DType dtype, void* out, const void* x, const SinkhornArgs& a) {
  if (a.matrices == 0 || a.n == 0) return;
  const int64_t nn = a.n * a.n;
  TIDAL_CUDA_FLOATING(dtype, "sinkhorn", T, {
    const int64_t matrix_bytes = nn * int64_t(sizeof(acc_t<T>));
    const int per = matrices_per_block(nn, matrix_bytes);
    sinkhorn_forward_kernel<T><<<blocks_for(a.matrices, per), unsigned(per * nn), size_t(per * matrix_bytes), stream>>>(
        static_cast<T*>(out), static_cast<const T*>(x), a, per);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

void launch_sinkhorn_backward(cudaStream_t stream, DType dtype, void* dx, const void* g, const void* x,
                              const SinkhornArgs& a) {
  if (a.matrices == 0 || a.n == 0) return;
  const int64_t nn = a.n * a.n, matrix_bytes = sinkhorn_backward_matrix_bytes(dtype, a);
  const int per = matrices_per_block(nn, matrix_bytes);
  TIDAL_CUDA_FLOATING(dtype, "sinkhorn_backward", T, {
    allow_shared_bytes(sinkhorn_backward_kernel<T>, per * matrix_bytes);
    sinkhorn_backward_kernel<T>
        <<<blocks_for(a.matrices, per), unsigned(per * nn), size_t(per * matrix_bytes), stream>>>(
            static_cast<T*>(dx), static_cast<const T*>(g), static_cast<const T*>(x), a, per);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tidal::cuda
