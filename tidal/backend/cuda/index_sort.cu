// topk and argsort. Small k (MoE routing: k <= 8 of up to 256 experts, up to ~1M rows): one thread per
// row runs the CPU backend's selection, so ties and NaNs come out the same. Otherwise rows are sorted
// stably with cub (radix sort for one row, segmented sort for many). Both compare unsigned keys in
// the CPU's total order (ordered_key): NaN the largest value, -0 equal to +0, ties in position order.
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <type_traits>

#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/index_launch.h"

namespace tidal::cuda {
namespace {

constexpr int kTopThreads = 64;

// The type values are read in: f32 for bf16, the element type otherwise.
template <class T>
struct KeyOf {
  using type = T;
};
template <>
struct KeyOf<bf16> {
  using type = float;
};
template <class T>
using key_t = typename KeyOf<T>::type;

template <class T>
__device__ __forceinline__ key_t<T> load_key(const T* p) {
  if constexpr (std::is_same_v<T, bf16>)
    return __bfloat162float(*p);
  else
    return *p;
}

// Every comparison runs on an unsigned integer whose order is the CPU's total order (index.cpp):
// NaN above +inf (every NaN one key), -0 equal to +0, integers by value. No floating-point compare
// is left to the compiler, and cub sorts plain unsigned keys (its float keys and its small-segment
// merge sort disagreed with the CPU on NaN rows, seen on an H200).
template <class T>
using okey_t = std::conditional_t<(sizeof(key_t<T>) > 4), uint64_t, uint32_t>;

template <class T>
__device__ __forceinline__ okey_t<T> ordered_key(const T* p) {
  using K = key_t<T>;
  const K v = load_key(p);
  if constexpr (std::is_same_v<K, float>) {
    uint32_t b = __float_as_uint(v);
    if ((b & 0x7fffffffu) > 0x7f800000u) return 0xffffffffu;  // NaN
    if ((b & 0x7fffffffu) == 0) b = 0;                        // -0
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  } else if constexpr (std::is_same_v<K, double>) {
    uint64_t b = uint64_t(__double_as_longlong(v));
    constexpr uint64_t kSign = 0x8000000000000000ull, kInf = 0x7ff0000000000000ull;
    if ((b & ~kSign) > kInf) return ~uint64_t(0);  // NaN
    if ((b & ~kSign) == 0) b = 0;                  // -0
    return (b & kSign) ? ~b : (b | kSign);
  } else if constexpr (std::is_same_v<K, int64_t>) {
    return uint64_t(v) ^ 0x8000000000000000ull;
  } else if constexpr (std::is_signed_v<K>) {
    return uint32_t(int32_t(v)) ^ 0x80000000u;
  } else {
    return uint32_t(v);
  }
}
// a strictly before b: Desc puts larger values first.
template <bool Desc, class U>
__device__ __forceinline__ bool before(U a, U b) {
  if constexpr (Desc)
    return a > b;
  else
    return a < b;
}

// index.cpp select_top, per thread, its best-k list in shared memory (element p at [p * kTopThreads]);
// the values are read back from x by position, so they keep their bits (-0, NaN payloads).
template <class T, bool Desc>
__global__ void topk_small_kernel(SortRows x, int64_t inner, int64_t k, bool sorted, T* values, int64_t* indices) {
  using U = okey_t<T>;
  __shared__ U top_sh[kSmallTopK * kTopThreads];
  __shared__ int64_t pos_sh[kSmallTopK * kTopThreads];
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= x.count) return;
  U* top = top_sh + threadIdx.x;
  int64_t* pos = pos_sh + threadIdx.x;
  constexpr int S = kTopThreads;
  const T* base = static_cast<const T*>(x.rows.data) + x.rows.offset(r);
  int64_t m = 0;
  for (int64_t j = 0; j < x.n; ++j) {
    const U v = ordered_key(base + j * x.dim_stride);
    if (m == k && !before<Desc>(v, top[(k - 1) * S])) continue;
    int64_t p = m == k ? k - 1 : m++;
    for (; p > 0 && before<Desc>(v, top[(p - 1) * S]); --p) {
      top[p * S] = top[(p - 1) * S];
      pos[p * S] = pos[(p - 1) * S];
    }
    top[p * S] = v;
    pos[p * S] = j;
  }
  if (!sorted) {  // the same positions in increasing order
    for (int64_t a = 1; a < k; ++a) {
      const int64_t q = pos[a * S];
      int64_t b = a;
      for (; b > 0 && pos[(b - 1) * S] > q; --b) pos[b * S] = pos[(b - 1) * S];
      pos[b * S] = q;
    }
  }
  const int64_t o = r / inner, i = r % inner;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t at = (o * k + j) * inner + i;
    values[at] = base[pos[j * S] * x.dim_stride];
    indices[at] = pos[j * S];
  }
}

template <class T>
__global__ void pack_rows_kernel(SortRows x, okey_t<T>* keys, int64_t* vals) {
  const int64_t total = x.count * x.n;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / x.n, j = e % x.n;
    keys[e] = ordered_key(static_cast<const T*>(x.rows.data) + x.rows.offset(r) + j * x.dim_stride);
    vals[e] = j;
  }
}

__global__ void offsets_kernel(int64_t* offsets, int64_t count, int64_t n) {
  for (int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; r <= count; r += int64_t(gridDim.x) * blockDim.x)
    offsets[r] = r * n;
}

__global__ void order_to_indices_kernel(const int64_t* order, int64_t count, int64_t n, int64_t inner,
                                        int64_t* indices) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count * n;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / n, j = e % n, o = r / inner, i = r % inner;
    indices[(o * n + j) * inner + i] = order[e];
  }
}

template <class T>
__global__ void topk_sorted_kernel(SortRows x, const int64_t* order, int64_t inner, int64_t k, T* values,
                                   int64_t* indices) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < x.count * k;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / k, j = e % k, o = r / inner, i = r % inner, p = order[r * x.n + j];
    const int64_t at = (o * k + j) * inner + i;
    values[at] = static_cast<const T*>(x.rows.data)[x.rows.offset(r) + p * x.dim_stride];
    indices[at] = p;
  }
}

__global__ void mark_kernel(const int64_t* order, int64_t count, int64_t n, int64_t k, uint8_t* mask) {
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < count * k;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / k, j = e % k;
    mask[r * n + order[r * n + j]] = 1;
  }
}

template <class T>
__global__ void topk_unsorted_kernel(SortRows x, const uint8_t* mask, int64_t inner, int64_t k, T* values,
                                     int64_t* indices) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= x.count) return;
  const int64_t o = r / inner, i = r % inner;
  const T* base = static_cast<const T*>(x.rows.data) + x.rows.offset(r);
  int64_t c = 0;
  for (int64_t p = 0; p < x.n && c < k; ++p) {
    if (mask[r * x.n + p] == 0) continue;
    const int64_t at = (o * k + c) * inner + i;
    values[at] = base[p * x.dim_stride];
    indices[at] = p;
    ++c;
  }
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// cub's sort of (count, n) keys K into order; with a null temp, its temp size into `bytes`.
template <class K>
void sort_keys(void* temp, size_t& bytes, const K* keys_in, K* keys_out, const int64_t* vals_in, int64_t* order,
               int64_t count, int64_t n, const int64_t* offsets, bool descending, cudaStream_t stream) {
  if (count == 1) {
    if (descending)
      TIDAL_CUDA_CHECK(cub::DeviceRadixSort::SortPairsDescending(temp, bytes, keys_in, keys_out, vals_in, order, n, 0,
                                                                 int(sizeof(K) * 8), stream));
    else
      TIDAL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, bytes, keys_in, keys_out, vals_in, order, n, 0,
                                                       int(sizeof(K) * 8), stream));
  } else if (descending) {
    TIDAL_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairsDescending(
        temp, bytes, keys_in, keys_out, vals_in, order, count * n, count, offsets, offsets + 1, stream));
  } else {
    TIDAL_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(temp, bytes, keys_in, keys_out, vals_in, order,
                                                               count * n, count, offsets, offsets + 1, stream));
  }
}

}  // namespace

void launch_topk_small(cudaStream_t stream, const SortRows& x, int64_t inner, int64_t k, bool largest, bool sorted,
                       void* values, int64_t* indices) {
  if (x.count == 0 || k == 0) return;
  const unsigned blocks = unsigned((x.count + kTopThreads - 1) / kTopThreads);
  dispatch_all_types(x.rows.dtype, "topk", [&](auto tag) {
    using T = decltype(tag);
    if (largest)
      topk_small_kernel<T, true>
          <<<blocks, kTopThreads, 0, stream>>>(x, inner, k, sorted, static_cast<T*>(values), indices);
    else
      topk_small_kernel<T, false>
          <<<blocks, kTopThreads, 0, stream>>>(x, inner, k, sorted, static_cast<T*>(values), indices);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

size_t sort_rows_scratch(DType dtype, int64_t count, int64_t n) {
  size_t total = 0;
  dispatch_all_types(dtype, "argsort", [&](auto tag) {
    using K = okey_t<decltype(tag)>;
    size_t temp = 0;
    sort_keys<K>(nullptr, temp, nullptr, nullptr, nullptr, nullptr, count, n, nullptr, false, nullptr);
    size_t temp_desc = 0;
    sort_keys<K>(nullptr, temp_desc, nullptr, nullptr, nullptr, nullptr, count, n, nullptr, true, nullptr);
    const size_t items = size_t(count * n);
    total = 2 * align256(items * sizeof(K)) + align256(items * 8) + align256(size_t(count + 1) * 8) +
            align256(temp > temp_desc ? temp : temp_desc);
  });
  return total;
}

void launch_sort_rows(cudaStream_t stream, const SortRows& x, bool descending, int64_t* order, void* scratch,
                      size_t scratch_bytes) {
  if (x.count == 0 || x.n == 0) return;
  dispatch_all_types(x.rows.dtype, "argsort", [&](auto tag) {
    using T = decltype(tag);
    using K = okey_t<T>;
    const size_t items = size_t(x.count * x.n);
    char* p = static_cast<char*>(scratch);
    auto take = [&](size_t bytes) {
      char* r = p;
      p += align256(bytes);
      return r;
    };
    K* keys_in = reinterpret_cast<K*>(take(items * sizeof(K)));
    K* keys_out = reinterpret_cast<K*>(take(items * sizeof(K)));
    int64_t* vals_in = reinterpret_cast<int64_t*>(take(items * 8));
    int64_t* offsets = reinterpret_cast<int64_t*>(take(size_t(x.count + 1) * 8));
    size_t temp_bytes = scratch_bytes - size_t(p - static_cast<char*>(scratch));
    pack_rows_kernel<T><<<grid_for(int64_t(items)), kThreads, 0, stream>>>(x, keys_in, vals_in);
    TIDAL_CUDA_CHECK_LAUNCH();
    offsets_kernel<<<grid_for(x.count + 1), kThreads, 0, stream>>>(offsets, x.count, x.n);
    TIDAL_CUDA_CHECK_LAUNCH();
    sort_keys<K>(p, temp_bytes, keys_in, keys_out, vals_in, order, x.count, x.n, offsets, descending, stream);
  });
}

void launch_order_to_indices(cudaStream_t stream, const int64_t* order, int64_t count, int64_t n, int64_t inner,
                             int64_t* indices) {
  if (count * n == 0) return;
  order_to_indices_kernel<<<grid_for(count * n), kThreads, 0, stream>>>(order, count, n, inner, indices);
  TIDAL_CUDA_CHECK_LAUNCH();
}

void launch_topk_from_order(cudaStream_t stream, const SortRows& x, const int64_t* order, int64_t inner, int64_t k,
                            bool sorted, uint8_t* mask, void* values, int64_t* indices) {
  if (x.count == 0 || k == 0) return;
  dispatch_all_types(x.rows.dtype, "topk", [&](auto tag) {
    using T = decltype(tag);
    if (sorted) {
      topk_sorted_kernel<T>
          <<<grid_for(x.count * k), kThreads, 0, stream>>>(x, order, inner, k, static_cast<T*>(values), indices);
      TIDAL_CUDA_CHECK_LAUNCH();
      return;
    }
    TIDAL_CUDA_CHECK(cudaMemsetAsync(mask, 0, size_t(x.count * x.n), stream));
    mark_kernel<<<grid_for(x.count * k), kThreads, 0, stream>>>(order, x.count, x.n, k, mask);
    TIDAL_CUDA_CHECK_LAUNCH();
    topk_unsorted_kernel<T><<<unsigned((x.count + kTopThreads - 1) / kTopThreads), kTopThreads, 0, stream>>>(
        x, mask, inner, k, static_cast<T*>(values), indices);
    TIDAL_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace tidal::cuda
