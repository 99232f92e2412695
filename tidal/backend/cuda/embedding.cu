// The embedding lookup and its deterministic backward: the (id, position) pairs are sorted by id with
// CUB's stable radix sort (positions enter in increasing order, so each id's run stays in position
// order), each id's run [start, end) is marked, and one thread per (row, column) adds its run in order.
#include <cub/device/device_radix_sort.cuh>

#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/embedding_launch.h"

namespace tidal::cuda {
namespace {

template <class T, class I>
__global__ void embedding_forward_kernel(T* out, const T* w, int64_t rs, int64_t cs, const I* ids, int64_t n,
                                         int64_t C) {
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n * C; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = k / C, c = k % C;
    out[k] = w[int64_t(ids[r]) * rs + c * cs];
  }
}

template <class I>
__global__ void sort_input_kernel(uint32_t* keys, uint32_t* positions, const I* ids, int64_t n) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r < n; r += int64_t(gridDim.x) * blockDim.x) {
    keys[r] = uint32_t(ids[r]);
    positions[r] = uint32_t(r);
  }
}

// run_start/run_end (V, zeroed) = the range of each id in the sorted keys.
__global__ void mark_runs_kernel(uint32_t* run_start, uint32_t* run_end, const uint32_t* keys, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t k = keys[i];
    if (i == 0 || keys[i - 1] != k) run_start[k] = uint32_t(i);
    if (i == n - 1 || keys[i + 1] != k) run_end[k] = uint32_t(i + 1);
  }
}

template <class T>
__global__ void segment_sum_kernel(T* gw, const T* g, const uint32_t* positions, const uint32_t* run_start,
                                   const uint32_t* run_end, int64_t V, int64_t C) {
  using A = acc_t<T>;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < V * C; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = k / C, c = k % C;
    const int64_t first = run_start[v], last = run_end[v];
    if (first == last) {
      gw[k] = from_acc<T>(A(0));
      continue;
    }
    A acc = to_acc(g[int64_t(positions[first]) * C + c]);  // the first row as is, as the CPU
    for (int64_t m = first + 1; m < last; ++m) acc += to_acc(g[int64_t(positions[m]) * C + c]);
    gw[k] = from_acc<T>(acc);
  }
}

// The scratch's parts, each 256-byte aligned: keys and positions in and out, run starts and ends, CUB's.
struct Scratch {
  uint32_t *keys_in, *keys_out, *pos_in, *pos_out, *run_start, *run_end;
  void* cub_temp;
  size_t cub_bytes, total;
};

size_t align_up(size_t b) { return (b + 255) / 256 * 256; }

int key_bits(int64_t V) {
  int bits = 1;
  while (bits < 32 && (int64_t(1) << bits) < V) ++bits;
  return bits;
}

Scratch carve(char* base, int64_t n, int64_t V) {
  Scratch s{};
  size_t cub_bytes = 0;
  TIDAL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, cub_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
      static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr), int(n), 0, key_bits(V)));
  const size_t ids = align_up(size_t(n) * 4), rows = align_up(size_t(V) * 4);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += bytes;
    return reinterpret_cast<uint32_t*>(p);
  };
  s.keys_in = take(ids);
  s.keys_out = take(ids);
  s.pos_in = take(ids);
  s.pos_out = take(ids);
  s.run_start = take(rows);
  s.run_end = take(rows);
  s.cub_temp = take(align_up(cub_bytes));
  s.cub_bytes = cub_bytes;
  s.total = off;
  return s;
}

}  // namespace

void launch_embedding_forward(cudaStream_t stream, DType dtype, void* out, const void* weight, int64_t row_stride,
                              int64_t col_stride, DType id_dtype, const void* ids, int64_t n, int64_t C) {
  if (n * C == 0) return;
  TIDAL_CUDA_FLOATING(dtype, "embedding", T, {
    T* o = static_cast<T*>(out);
    const T* w = static_cast<const T*>(weight);
    if (id_dtype == DType::i32)
      embedding_forward_kernel<T, int32_t><<<grid_for(n * C), kThreads, 0, stream>>>(
          o, w, row_stride, col_stride, static_cast<const int32_t*>(ids), n, C);
    else
      embedding_forward_kernel<T, int64_t><<<grid_for(n * C), kThreads, 0, stream>>>(
          o, w, row_stride, col_stride, static_cast<const int64_t*>(ids), n, C);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

size_t embedding_backward_scratch_bytes(int64_t n, int64_t V) { return carve(nullptr, n, V).total; }

void launch_embedding_backward(cudaStream_t stream, DType dtype, void* grad_weight, const void* g, DType id_dtype,
                               const void* ids, int64_t n, int64_t V, int64_t C, void* scratch, size_t scratch_bytes) {
  if (V * C == 0) return;
  Scratch s = carve(static_cast<char*>(scratch), n, V);
  if (s.total > scratch_bytes)
    throw_cuda_error(cudaErrorInvalidValue, "embedding_backward scratch", __FILE__, __LINE__);
  TIDAL_CUDA_CHECK(cudaMemsetAsync(s.run_start, 0, size_t(V) * 4, stream));
  TIDAL_CUDA_CHECK(cudaMemsetAsync(s.run_end, 0, size_t(V) * 4, stream));
  if (n > 0) {
    if (id_dtype == DType::i32)
      sort_input_kernel<int32_t>
          <<<grid_for(n), kThreads, 0, stream>>>(s.keys_in, s.pos_in, static_cast<const int32_t*>(ids), n);
    else
      sort_input_kernel<int64_t>
          <<<grid_for(n), kThreads, 0, stream>>>(s.keys_in, s.pos_in, static_cast<const int64_t*>(ids), n);
    TIDAL_CUDA_CHECK_LAUNCH();
    TIDAL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(s.cub_temp, s.cub_bytes, s.keys_in, s.keys_out, s.pos_in,
                                                     s.pos_out, int(n), 0, key_bits(V), stream));
    mark_runs_kernel<<<grid_for(n), kThreads, 0, stream>>>(s.run_start, s.run_end, s.keys_out, n);
    TIDAL_CUDA_CHECK_LAUNCH();
  }
  TIDAL_CUDA_FLOATING(dtype, "embedding", T, {
    segment_sum_kernel<T><<<grid_for(V * C), kThreads, 0, stream>>>(
        static_cast<T*>(grad_weight), static_cast<const T*>(g), s.pos_out, s.run_start, s.run_end, V, C);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tidal::cuda
