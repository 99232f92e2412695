#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/elementwise_loops.cuh"
#include "tidal/backend/cuda/philox.cuh"
#include "tidal/backend/cuda/random_launch.h"

namespace tidal::cuda {
namespace {

// One thread per Philox block: blocks start / 4 .. (start + n - 1) / 4, each giving the positions of
// its four lanes that fall in [start, start + n).
template <class T, bool NORMAL>
__global__ void random_fill_kernel(T* out, int64_t n, uint64_t seed, uint64_t start, int64_t blocks) {
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < blocks; q += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t b = start / 4 + uint64_t(q);
    const Philox4 r = philox4x32(b, seed);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint64_t i = b * 4 + uint64_t(l) - start;  // wraps to huge below start
      if (i >= uint64_t(n)) continue;
      const float v = NORMAL ? philox_normal_of(r, l) : philox_unit(philox_lane(r, l));
      out[i] = store_work<T>(v);
    }
  }
}

template <class T>
__global__ void randint_kernel(T* out, int64_t n, int64_t low, uint64_t range, uint64_t seed, uint64_t start,
                               int64_t blocks) {
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < blocks; q += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t b = start / 4 + uint64_t(q);
    const Philox4 r = philox4x32(b, seed);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint64_t i = b * 4 + uint64_t(l) - start;
      if (i >= uint64_t(n)) continue;
      out[i] = static_cast<T>(low + int64_t(uint64_t(philox_lane(r, l)) * range >> 32));
    }
  }
}

template <class T>
__device__ __forceinline__ void drop_one(const T* x, T* out, uint8_t* mask, int64_t i, uint32_t bits, float p,
                                         acc_t<T> scale) {
  const bool keep = philox_unit(bits) >= p;
  mask[i] = uint8_t(keep);
  out[i] = store_work<T>(keep ? load_work(x[i]) * scale : acc_t<T>(0));
}

// Thread q: elements 4q .. 4q + 3 from block start / 4 + q (the CPU's dropout_forward).
template <class T>
__global__ void dropout_kernel(T* out, uint8_t* mask, const T* x, int64_t n, float p, acc_t<T> scale, uint64_t seed,
                               uint64_t start) {
  const int64_t groups = (n + 3) / 4;
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < groups; q += int64_t(gridDim.x) * blockDim.x) {
    const Philox4 r = philox4x32(start / 4 + uint64_t(q), seed);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const int64_t i = 4 * q + l;
      if (i < n) drop_one(x, out, mask, i, philox_lane(r, l), p, scale);
    }
  }
}

// Thread t: row t / per_row of the (outer * rows) rows, Philox block (row_pos / 4) + t % per_row, the
// lanes of it whose positions fall in the row [row_pos, row_pos + inner).
template <class T>
__global__ void dropout_rows_kernel(DropoutRowsArgs a, T* out, uint8_t* mask, const T* x, float p, acc_t<T> scale,
                                    int64_t per_row, int64_t total) {
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = t / per_row, q = t % per_row;
    const int64_t o = r / a.rows, row = r % a.rows;
    const int64_t g = a.row_map ? a.row_map[row] : a.row_offset + row;
    const uint64_t row_pos = a.start + uint64_t((o * a.global_rows + g) * a.global_inner + a.col_offset);
    const uint64_t b = row_pos / 4 + uint64_t(q);
    const Philox4 bits = philox4x32(b, a.seed);
#pragma unroll
    for (int l = 0; l < 4; ++l) {
      const uint64_t c = b * 4 + uint64_t(l) - row_pos;  // wraps to huge before the row
      if (c < uint64_t(a.inner)) drop_one(x, out, mask, r * a.inner + int64_t(c), philox_lane(bits, l), p, scale);
    }
  }
}

template <class T>
__global__ void dropout_backward_kernel(T* dx, const T* g, const uint8_t* mask, int64_t n, acc_t<T> scale) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = store_work<T>(mask[i] ? load_work(g[i]) * scale : acc_t<T>(0));
}

int64_t blocks_of(int64_t n, uint64_t start) { return int64_t((start + uint64_t(n) - 1) / 4 - start / 4 + 1); }

}  // namespace

void launch_random_fill(cudaStream_t stream, void* out, DType dtype, int64_t n, bool normal, uint64_t seed,
                        uint64_t start) {
  if (n == 0) return;
  const int64_t blocks = blocks_of(n, start);
  TIDAL_CUDA_FLOATING(dtype, normal ? "randn" : "rand", T, {
    if (normal)
      random_fill_kernel<T, true>
          <<<grid_for(blocks), kThreads, 0, stream>>>(static_cast<T*>(out), n, seed, start, blocks);
    else
      random_fill_kernel<T, false>
          <<<grid_for(blocks), kThreads, 0, stream>>>(static_cast<T*>(out), n, seed, start, blocks);
  });
  TIDAL_CUDA_CHECK_LAUNCH();
}

void launch_randint_fill(cudaStream_t stream, void* out, DType dtype, int64_t n, int64_t low, uint64_t range,
                         uint64_t seed, uint64_t start) {
  if (n == 0) return;
  const int64_t blocks = blocks_of(n, start);
  if (dtype == DType::i32)
    randint_kernel<<<grid_for(blocks), kThreads, 0, stream>>>(static_cast<int32_t*>(out), n, low, range, seed, start,
                                                              blocks);
  else if (dtype == DType::i64)
    randint_kernel<<<grid_for(blocks), kThreads, 0, stream>>>(static_cast<int64_t*>(out), n, low, range, seed, start,
                                                              blocks);
  else
    unsupported_dtype("randint", dtype);
  TIDAL_CUDA_CHECK_LAUNCH();
}

void launch_dropout(cudaStream_t stream, void* out, uint8_t* mask, const void* x, DType dtype, int64_t n, float p,
                    double scale, uint64_t seed, uint64_t start) {
  if (n == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "dropout", T,
                      dropout_kernel<T><<<grid_for((n + 3) / 4), kThreads, 0, stream>>>(
                          static_cast<T*>(out), mask, static_cast<const T*>(x), n, p, acc_t<T>(scale), seed, start));
  TIDAL_CUDA_CHECK_LAUNCH();
}

void launch_dropout_rows(cudaStream_t stream, const DropoutRowsArgs& a, void* out, uint8_t* mask, const void* x,
                         DType dtype, float p, double scale) {
  const int64_t rows = a.outer * a.rows;
  if (rows == 0 || a.inner == 0) return;
  const int64_t per_row = (a.inner + 3) / 4 + 1;  // a row of inner positions spans at most this many blocks
  const int64_t total = rows * per_row;
  TIDAL_CUDA_FLOATING(dtype, "dropout_rows", T,
                      dropout_rows_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(
                          a, static_cast<T*>(out), mask, static_cast<const T*>(x), p, acc_t<T>(scale), per_row, total));
  TIDAL_CUDA_CHECK_LAUNCH();
}

void launch_dropout_backward(cudaStream_t stream, void* dx, const void* g, const uint8_t* mask, DType dtype, int64_t n,
                             double scale) {
  if (n == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "dropout", T,
                      dropout_backward_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(
                          static_cast<T*>(dx), static_cast<const T*>(g), mask, n, acc_t<T>(scale)));
  TIDAL_CUDA_CHECK_LAUNCH();
}

}  // namespace tidal::cuda
