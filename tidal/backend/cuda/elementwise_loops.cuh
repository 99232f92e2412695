#pragma once
// The elementwise machinery of the elementwise, random and activation families (device code only):
// loads into the type the CPU backend computes in, stores converting as the CPU does, the CPU's
// vectorized math (backend/cpu/vec_math.h) ported so results agree to rounding, and two map kernels:
// a grid-stride loop over broadcast strided operands, and the hot path for contiguous operands of one
// dtype with 16-byte vector loads and stores.
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tidal/backend/cuda/device_math.cuh"

namespace tidal::cuda {

// The type the CPU computes in: f32 for f32 and bf16, f64 for f64, the integer type itself.
template <class T>
using work_t = std::conditional_t<std::is_integral_v<T>, T, acc_t<T>>;

template <class T>
__device__ __forceinline__ work_t<T> load_work(T x) {
  if constexpr (std::is_same_v<T, bf16>)
    return __bfloat162float(x);
  else
    return x;
}

// Round to nearest even with the CPU's bits (dtype.h BFloat16::round_from), NaN included.
__device__ __forceinline__ bf16 bf16_rne(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t b = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded;
  return __ushort_as_bfloat16(static_cast<unsigned short>(b));
}

// A floating value to an integer type as x86's truncating conversions give it (what the CPU backend's
// T(x) compiles to): toward zero; NaN and out-of-range values give the integer indefinite (the lowest
// value); u8 takes the low byte of the 32-bit conversion.
template <class I, class V>
__device__ __forceinline__ I float_to_int(V v) {
  const double d = double(v);
  if constexpr (std::is_same_v<I, int64_t>) {
    return (d >= -9223372036854775808.0 && d < 9223372036854775808.0) ? int64_t(d) : INT64_MIN;
  } else {
    const int32_t r = (d >= -2147483648.0 && d < 2147483648.0) ? int32_t(d) : INT32_MIN;
    return static_cast<I>(r);
  }
}

// A work value stored as D: bf16 through f32 rounded to nearest even, floating to integer as above,
// anything else by C++'s conversion (integers wrap, integers to floating round to nearest).
template <class D, class V>
__device__ __forceinline__ D store_work(V v) {
  if constexpr (std::is_same_v<D, bf16>)
    return bf16_rne(float(v));
  else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<V>)
    return float_to_int<D>(v);
  else
    return static_cast<D>(v);
}

// --- the CPU's math (vec_math.h): f32 by its polynomials, f64 by the library
__device__ __forceinline__ float fast_exp(float x) {
  const float xc = fminf(fmaxf(x, -100.0f), 100.0f);
  const float t = __fadd_rn(__fmul_rn(xc, 1.44269504088896341f), 12582912.0f);
  const float n = __fsub_rn(t, 12582912.0f);
  const float r = __fadd_rn(__fsub_rn(xc, __fmul_rn(n, 0.693359375f)), __fmul_rn(n, 2.12194440e-4f));
  // Unfused, as the CPU computes it (ISO C++ mode: no contraction), so the bits agree.
  float p = 1.9875691500e-4f;
  p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
  p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
  p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
  p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
  p = __fadd_rn(__fadd_rn(__fmul_rn(p, __fmul_rn(r, r)), r), 1.0f);
  const int32_t ni = __float_as_int(t) - 0x4B400000;
  const int32_t e = min(max(ni, -126), 127) + 127;
  uint32_t y = __float_as_uint(__fmul_rn(p, __int_as_float(e << 23)));
  y = ni < -126 ? 0u : y;
  y = ni > 127 ? 0x7f800000u : y;
  const uint32_t xb = __float_as_uint(x);
  y = (xb & 0x7fffffffu) > 0x7f800000u ? xb : y;
  return __uint_as_float(y);
}
__device__ __forceinline__ double fast_exp(double x) { return ::exp(x); }

__device__ __forceinline__ float fast_erf(float x) {
  const float a = fabsf(x);
  const float t = __fdiv_rn(1.0f, __fadd_rn(1.0f, __fmul_rn(0.3275911f, a)));
  float p = 1.061405429f;
  p = __fsub_rn(__fmul_rn(p, t), 1.453152027f);
  p = __fadd_rn(__fmul_rn(p, t), 1.421413741f);
  p = __fsub_rn(__fmul_rn(p, t), 0.284496736f);
  p = __fadd_rn(__fmul_rn(p, t), 0.254829592f);
  const float y = __fsub_rn(1.0f, __fmul_rn(__fmul_rn(p, t), fast_exp(-__fmul_rn(a, a))));
  return x < 0.0f ? -y : y;
}
__device__ __forceinline__ double fast_erf(double x) { return ::erf(x); }

template <class A>
__device__ __forceinline__ A fast_sigmoid(A x) {
  return A(1) / (A(1) + fast_exp(-x));
}

// --- operands
// The element offset of linear index i: the common one- and zero-dim cases without divisions.
__device__ __forceinline__ int64_t at(const Strided& s, int64_t i) {
  if (s.ndim == 0) return 0;
  if (s.ndim == 1) return i * s.strides[0];
  return s.offset(i);
}

inline bool is_flat(const Strided& s) { return s.ndim == 0 || (s.ndim == 1 && s.strides[0] == 1); }
inline bool is_aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int N>
struct StridedPack {
  Strided s[N];
};
template <class T, int N>
struct PtrPack {
  const T* p[N];
};

template <class T>
union Vec16 {
  uint4 u;
  T t[16 / sizeof(T)];
};

// out[i] = f(in_0[i], ...) over broadcast strided operands, each loaded into its work type.
template <class TOut, class TIn, int N, class F, size_t... K>
__device__ __forceinline__ void map_at(const Strided& out, const StridedPack<N>& in, int64_t i, const F& f,
                                       std::index_sequence<K...>) {
  static_cast<TOut*>(out.data)[at(out, i)] =
      store_work<TOut>(f(load_work(static_cast<const TIn*>(in.s[K].data)[at(in.s[K], i)])...));
}

template <class TOut, class TIn, int N, class F>
__global__ void __launch_bounds__(kThreads) map_strided_kernel(Strided out, StridedPack<N> in, int64_t n, F f) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    map_at<TOut, TIn, N>(out, in, i, f, std::make_index_sequence<N>{});
}

template <class T, int N, class F, size_t... K>
__device__ __forceinline__ T map_lane(const Vec16<T> (&x)[N], int j, const F& f, std::index_sequence<K...>) {
  return store_work<T>(f(load_work(x[K].t[j])...));
}

template <class T, int N, class F, size_t... K>
__device__ __forceinline__ T map_flat(const PtrPack<T, N>& in, int64_t i, const F& f, std::index_sequence<K...>) {
  return store_work<T>(f(load_work(in.p[K][i])...));
}

// The contiguous hot path: 16 bytes per operand and step (every pointer 16-byte aligned), then the tail.
template <class T, int N, class F>
__global__ void __launch_bounds__(kThreads) map_vec_kernel(T* out, PtrPack<T, N> in, int64_t n, F f) {
  constexpr int V = 16 / int(sizeof(T));
  const int64_t nvec = n / V, stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t tid = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t v = tid; v < nvec; v += stride) {
    Vec16<T> x[N];
#pragma unroll
    for (int k = 0; k < N; ++k) x[k].u = __ldg(reinterpret_cast<const uint4*>(in.p[k]) + v);
    Vec16<T> r;
#pragma unroll
    for (int j = 0; j < V; ++j) r.t[j] = map_lane<T, N>(x, j, f, std::make_index_sequence<N>{});
    reinterpret_cast<uint4*>(out)[v] = r.u;
  }
  for (int64_t i = nvec * V + tid; i < n; i += stride) out[i] = map_flat<T, N>(in, i, f, std::make_index_sequence<N>{});
}

// out = f(ins...) elementwise over n elements: the vector path when every operand is contiguous, of one
// dtype and 16-byte aligned, else the strided loop. f64 (gradchecks, not the hot path) takes the strided
// loop: two lanes of f64 exp spill registers.
template <class TOut, class TIn, int N, class F>
void run_map(cudaStream_t stream, const Strided& out, const Strided (&in)[N], int64_t n, const F& f) {
  if (n == 0) return;
  bool vec = std::is_same_v<TOut, TIn> && is_flat(out) && is_aligned16(out.data);
  for (int k = 0; k < N; ++k) vec = vec && is_flat(in[k]) && is_aligned16(in[k].data);
  if constexpr (std::is_same_v<TOut, TIn> && !std::is_same_v<TIn, double>) {
    if (vec) {
      PtrPack<TIn, N> p;
      for (int k = 0; k < N; ++k) p.p[k] = static_cast<const TIn*>(in[k].data);
      constexpr int64_t V = 16 / int64_t(sizeof(TIn));
      map_vec_kernel<TIn, N, F>
          <<<grid_for((n + V - 1) / V), kThreads, 0, stream>>>(static_cast<TOut*>(out.data), p, n, f);
      TIDAL_CUDA_CHECK_LAUNCH();
      return;
    }
  }
  StridedPack<N> p;
  for (int k = 0; k < N; ++k) p.s[k] = in[k];
  map_strided_kernel<TOut, TIn, N, F><<<grid_for(n), kThreads, 0, stream>>>(out, p, n, f);
  TIDAL_CUDA_CHECK_LAUNCH();
}

}  // namespace tidal::cuda

// Runs the statement with `T` the element type of any dtype.
#define TIDAL_CUDA_ALL(dtype, T, ...)                             \
  switch (dtype) {                                                \
    TIDAL_CUDA_FLOATING_CASES(dtype, T, __VA_ARGS__)              \
    TIDAL_CUDA_CASE(::tidal::DType::i32, int32_t, T, __VA_ARGS__) \
    TIDAL_CUDA_CASE(::tidal::DType::i64, int64_t, T, __VA_ARGS__) \
    TIDAL_CUDA_CASE(::tidal::DType::u8, uint8_t, T, __VA_ARGS__)  \
  }
