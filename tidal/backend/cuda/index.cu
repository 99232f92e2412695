// The index family's gather, scatter_add, range checks and bincount. scatter_add is deterministic
// without float atomics: every output element receives its sources in increasing j, as on the CPU.
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/index_launch.h"

namespace tidal::cuda {
namespace {

// a + b in T's arithmetic, rounded to T (bf16: f32 then nearest even; integers wrap as on the CPU).
template <class T>
__device__ __forceinline__ T add_as(T a, T b) {
  if constexpr (std::is_same_v<T, bf16>)
    return __float2bfloat16_rn(__bfloat162float(a) + __bfloat162float(b));
  else
    return T(a + b);
}

template <class D, class I>
__global__ void gather_kernel(IndexShape s, int64_t numel, IndexOperand out, IndexOperand x, IndexOperand idx) {
  for (int64_t lin = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; lin < numel;
       lin += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = lin, oo = 0, xo = 0, io = 0, x_dim_stride = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {  // constant indices only: the arrays stay in registers
      if (d >= s.ndim) continue;
      const int64_t c = rest % s.sizes[d];
      rest /= s.sizes[d];
      oo += c * out.strides[d];
      io += c * idx.strides[d];
      if (d != s.dim)
        xo += c * x.strides[d];
      else
        x_dim_stride = x.strides[d];
    }
    xo += int64_t(static_cast<const I*>(idx.data)[io]) * x_dim_stride;
    static_cast<D*>(out.data)[oo] = static_cast<const D*>(x.data)[xo];
  }
}

// One thread per position of iter with dim's coordinate 0: the sum over j in order.
template <class T, class I>
__global__ void scatter_direct_kernel(IndexShape s, int64_t positions, IndexOperand out, IndexOperand src,
                                      IndexOperand idx) {
  for (int64_t lin = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; lin < positions;
       lin += int64_t(gridDim.x) * blockDim.x) {
    int64_t rest = lin, oo = 0, so = 0, io = 0, n = 0, ods = 0, sds = 0, ids = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {  // constant indices only: the arrays stay in registers
      if (d >= s.ndim) continue;
      const int64_t size = s.sizes[d], os = out.strides[d], ss = src.strides[d], is = idx.strides[d];
      if (d == s.dim) {
        n = size;
        ods = os;
        sds = ss;
        ids = is;
      } else {
        const int64_t c = rest % size;
        rest /= size;
        oo += c * os;
        so += c * ss;
        io += c * is;
      }
    }
    T* o = static_cast<T*>(out.data);
    const T* sp = static_cast<const T*>(src.data);
    const I* ip = static_cast<const I*>(idx.data);
    for (int64_t j = 0; j < n; ++j) {
      T& dst = o[oo + int64_t(ip[io + j * ids]) * ods];
      dst = add_as(dst, sp[so + j * sds]);
    }
  }
}

template <class I>
__global__ void pack_keys_kernel(const I* idx, int64_t stride, int64_t n, uint64_t* keys, int64_t* vals) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < n; j += int64_t(gridDim.x) * blockDim.x) {
    keys[j] = uint64_t(int64_t(idx[j * stride]));
    vals[j] = j;
  }
}

__global__ void segments_kernel(const uint64_t* keys, int64_t n, int64_t* begin, int64_t* end) {
  for (int64_t q = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; q < n; q += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t k = keys[q];
    if (q == 0 || keys[q - 1] != k) begin[k] = q;
    if (q == n - 1 || keys[q + 1] != k) end[k] = q + 1;
  }
}

// One thread per (target row p, inner position): its sources (sorted stably: increasing j) in order.
template <class T>
__global__ void scatter_sorted_kernel(IndexShape s, int64_t rows, int64_t inner, IndexOperand out, IndexOperand src,
                                      const int64_t* order, const int64_t* begin, const int64_t* end) {
  for (int64_t lin = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; lin < rows * inner;
       lin += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = lin / inner;
    const int64_t b = begin[p], e = end[p];
    if (b == e) continue;
    int64_t rest = lin % inner, oo = p * out.strides[0], so = 0;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 1; --d) {
      if (d >= s.ndim) continue;
      const int64_t c = rest % s.sizes[d];
      rest /= s.sizes[d];
      oo += c * out.strides[d];
      so += c * src.strides[d];
    }
    T* o = static_cast<T*>(out.data);
    const T* sp = static_cast<const T*>(src.data);
    T acc = o[oo];
    for (int64_t q = b; q < e; ++q) acc = add_as(acc, sp[so + order[q] * src.strides[0]]);
    o[oo] = acc;
  }
}

template <class I>
__global__ void out_of_range_kernel(const I* idx, int64_t n, int64_t limit, int64_t* first) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    if (uint64_t(int64_t(idx[i])) >= uint64_t(limit))  // negatives wrap: out of range too
      atomicMin(reinterpret_cast<unsigned long long*>(first), static_cast<unsigned long long>(i));
}

__global__ void minmax_init_kernel(int64_t* mm) {
  mm[0] = std::numeric_limits<int64_t>::max();
  mm[1] = std::numeric_limits<int64_t>::min();
}

template <class I>
__global__ void minmax_kernel(const I* idx, int64_t n, int64_t* mm) {
  long long lo = std::numeric_limits<long long>::max(), hi = std::numeric_limits<long long>::min();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const long long v = static_cast<long long>(idx[i]);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const long long l = __shfl_down_sync(0xffffffffu, lo, o), h = __shfl_down_sync(0xffffffffu, hi, o);
    lo = l < lo ? l : lo;
    hi = h > hi ? h : hi;
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMin(reinterpret_cast<long long*>(mm), lo);
    atomicMax(reinterpret_cast<long long*>(mm + 1), hi);
  }
}

constexpr int64_t kSharedBins = 8192;

template <class I>
__global__ void bincount_shared_kernel(unsigned long long* counts, int64_t length, const I* idx, int64_t n) {
  extern __shared__ unsigned int bins[];
  for (int64_t b = threadIdx.x; b < length; b += blockDim.x) bins[b] = 0;
  __syncthreads();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    atomicAdd(&bins[int64_t(idx[i])], 1u);
  __syncthreads();
  for (int64_t b = threadIdx.x; b < length; b += blockDim.x)
    if (bins[b] != 0) atomicAdd(&counts[b], static_cast<unsigned long long>(bins[b]));
}

template <class I>
__global__ void bincount_global_kernel(unsigned long long* counts, const I* idx, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    atomicAdd(&counts[int64_t(idx[i])], 1ull);
}

template <class F>
void dispatch_index_type(DType t, const char* kernel, F&& f) {
  switch (t) {
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    default: unsupported_dtype(kernel, t);
  }
}

int64_t read_back(cudaStream_t stream, const int64_t* p) {
  int64_t v = 0;
  TIDAL_CUDA_CHECK(cudaMemcpyAsync(&v, p, sizeof(v), cudaMemcpyDeviceToHost, stream));
  TIDAL_CUDA_CHECK(cudaStreamSynchronize(stream));
  return v;
}

int key_bits(int64_t rows) {
  int bits = 1;
  while (bits < 63 && (int64_t(1) << bits) < rows) ++bits;
  return bits;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

size_t radix_temp_bytes(int64_t n, int64_t rows) {
  size_t bytes = 0;
  TIDAL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const uint64_t*>(nullptr), static_cast<uint64_t*>(nullptr),
      static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), n, 0, key_bits(rows)));
  return bytes;
}

}  // namespace

void launch_gather(cudaStream_t stream, const IndexShape& iter, int64_t numel, const IndexOperand& out,
                   const IndexOperand& x, const IndexOperand& index, int64_t itemsize, DType index_dtype) {
  if (numel == 0) return;
  dispatch_index_type(index_dtype, "gather", [&](auto itag) {
    using I = decltype(itag);
    auto run = [&](auto dtag) {
      gather_kernel<decltype(dtag), I><<<grid_for(numel), kThreads, 0, stream>>>(iter, numel, out, x, index);
      TIDAL_CUDA_CHECK_LAUNCH();
    };
    switch (itemsize) {
      case 1: return run(uint8_t{});
      case 2: return run(uint16_t{});
      case 4: return run(uint32_t{});
      case 8: return run(uint64_t{});
    }
    unsupported_dtype("gather (element size)", index_dtype);
  });
}

void launch_scatter_add_direct(cudaStream_t stream, const IndexShape& iter, const IndexOperand& out,
                               const IndexOperand& src, const IndexOperand& index, DType dtype, DType index_dtype) {
  int64_t positions = 1;
  for (int d = 0; d < iter.ndim; ++d) positions *= d == iter.dim ? 1 : iter.sizes[d];
  if (positions == 0 || iter.sizes[iter.dim] == 0) return;
  dispatch_index_type(index_dtype, "scatter_add", [&](auto itag) {
    dispatch_all_types(dtype, "scatter_add", [&](auto tag) {
      scatter_direct_kernel<decltype(tag), decltype(itag)>
          <<<grid_for(positions), kThreads, 0, stream>>>(iter, positions, out, src, index);
      TIDAL_CUDA_CHECK_LAUNCH();
    });
  });
}

size_t scatter_add_sorted_scratch(int64_t n, int64_t rows) {
  return 4 * align256(size_t(n) * 8) + 2 * align256(size_t(rows) * 8) + align256(radix_temp_bytes(n, rows));
}

void launch_scatter_add_sorted(cudaStream_t stream, const IndexShape& iter, const IndexOperand& out,
                               const IndexOperand& src, const IndexOperand& index, DType dtype, DType index_dtype,
                               int64_t rows, void* scratch, size_t scratch_bytes) {
  const int64_t n = iter.sizes[0];
  int64_t inner = 1;
  for (int d = 1; d < iter.ndim; ++d) inner *= iter.sizes[d];
  if (n == 0 || inner == 0 || rows == 0) return;
  char* p = static_cast<char*>(scratch);
  auto take = [&](size_t bytes) {
    char* r = p;
    p += align256(bytes);
    return r;
  };
  auto* keys_in = reinterpret_cast<uint64_t*>(take(size_t(n) * 8));
  auto* keys_out = reinterpret_cast<uint64_t*>(take(size_t(n) * 8));
  auto* vals_in = reinterpret_cast<int64_t*>(take(size_t(n) * 8));
  auto* vals_out = reinterpret_cast<int64_t*>(take(size_t(n) * 8));
  auto* begin = reinterpret_cast<int64_t*>(take(size_t(rows) * 8));
  auto* end = reinterpret_cast<int64_t*>(take(size_t(rows) * 8));
  size_t temp_bytes = scratch_bytes - size_t(p - static_cast<char*>(scratch));
  dispatch_index_type(index_dtype, "scatter_add", [&](auto itag) {
    using I = decltype(itag);
    pack_keys_kernel<I><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const I*>(index.data), index.strides[0], n,
                                                              keys_in, vals_in);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
  TIDAL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(p, temp_bytes, keys_in, keys_out, vals_in, vals_out, n, 0,
                                                   key_bits(rows), stream));
  TIDAL_CUDA_CHECK(cudaMemsetAsync(begin, 0, size_t(rows) * 8, stream));
  TIDAL_CUDA_CHECK(cudaMemsetAsync(end, 0, size_t(rows) * 8, stream));
  segments_kernel<<<grid_for(n), kThreads, 0, stream>>>(keys_out, n, begin, end);
  TIDAL_CUDA_CHECK_LAUNCH();
  dispatch_all_types(dtype, "scatter_add", [&](auto tag) {
    scatter_sorted_kernel<decltype(tag)>
        <<<grid_for(rows * inner), kThreads, 0, stream>>>(iter, rows, inner, out, src, vals_out, begin, end);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

int64_t launch_first_out_of_range(cudaStream_t stream, const void* index, DType index_dtype, int64_t n, int64_t limit,
                                  int64_t* scratch) {
  if (n == 0) return -1;
  TIDAL_CUDA_CHECK(cudaMemsetAsync(scratch, 0x7f, sizeof(int64_t), stream));
  dispatch_index_type(index_dtype, "first_out_of_range", [&](auto itag) {
    using I = decltype(itag);
    out_of_range_kernel<I><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const I*>(index), n, limit, scratch);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
  const int64_t first = read_back(stream, scratch);
  return first < n ? first : -1;
}

int64_t launch_index_max(cudaStream_t stream, const void* index, DType index_dtype, int64_t n, int64_t* min_out,
                         int64_t* scratch) {
  minmax_init_kernel<<<1, 1, 0, stream>>>(scratch);
  TIDAL_CUDA_CHECK_LAUNCH();
  dispatch_index_type(index_dtype, "index_max", [&](auto itag) {
    using I = decltype(itag);
    minmax_kernel<I><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const I*>(index), n, scratch);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
  int64_t mm[2] = {0, 0};
  TIDAL_CUDA_CHECK(cudaMemcpyAsync(mm, scratch, sizeof(mm), cudaMemcpyDeviceToHost, stream));
  TIDAL_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (min_out != nullptr) *min_out = mm[0];
  return mm[1];
}

void launch_bincount(cudaStream_t stream, int64_t* counts, int64_t length, const void* index, DType index_dtype,
                     int64_t n) {
  if (n == 0 || length == 0) return;
  auto* c = reinterpret_cast<unsigned long long*>(counts);
  dispatch_index_type(index_dtype, "bincount", [&](auto itag) {
    using I = decltype(itag);
    const I* idx = static_cast<const I*>(index);
    if (length <= kSharedBins) {
      const unsigned blocks = grid_for(n) < 1024u ? grid_for(n) : 1024u;  // bounds the flush of the bins
      bincount_shared_kernel<I><<<blocks, kThreads, size_t(length) * sizeof(unsigned), stream>>>(c, length, idx, n);
    } else {
      bincount_global_kernel<I><<<grid_for(n), kThreads, 0, stream>>>(c, idx, n);
    }
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tidal::cuda
