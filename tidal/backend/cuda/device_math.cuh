#pragma once
// What every .cu file of the backend shares: the element types of tidal's dtypes on the device, their
// accumulation types (f32 for bf16, as the CPU backend; f64 for f64), dtype dispatch, and the launch
// shape of grid-stride loops.
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "tidal/backend/cuda/check.h"
#include "tidal/backend/cuda/strided.h"

namespace tidal::cuda {

using bf16 = __nv_bfloat16;

// The type arithmetic runs in for storage type T.
template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
__device__ __forceinline__ acc_t<T> to_acc(T x) {
  if constexpr (std::is_same_v<T, bf16>)
    return __bfloat162float(x);
  else
    return acc_t<T>(x);
}

// Round to nearest even, as the CPU backend's BFloat16 (dtype.h) does.
template <class T, class A>
__device__ __forceinline__ T from_acc(A x) {
  if constexpr (std::is_same_v<T, bf16>)
    return __float2bfloat16_rn(float(x));
  else
    return T(x);
}

// A value of any dtype read as double / written from double (casts, fills; not the hot paths).
__device__ __forceinline__ double load_as_double(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return double(static_cast<const float*>(p)[i]);
    case DType::bf16: return double(__bfloat162float(static_cast<const bf16*>(p)[i]));
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::i32: return double(static_cast<const int32_t*>(p)[i]);
    case DType::i64: return double(static_cast<const int64_t*>(p)[i]);
    case DType::u8: return double(static_cast<const uint8_t*>(p)[i]);
  }
  return 0;
}

// Calls f(T{}) for every dtype's device element type.
template <class F>
void dispatch_all_types(DType t, const char* kernel, F&& f) {
  switch (t) {
    case DType::f32: return f(float{});
    case DType::bf16: return f(bf16{});
    case DType::f64: return f(double{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::u8: return f(uint8_t{});
  }
  unsupported_dtype(kernel, t);
}

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, no more than the work.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return unsigned(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

}  // namespace tidal::cuda

#define TIDAL_CUDA_CASE(value, type, T, ...) \
  case value: {                              \
    using T = type;                          \
    __VA_ARGS__;                             \
    break;                                   \
  }

// The switch cases of the floating dtypes (f32, bf16, f64), each running the statement with `T` its type.
#define TIDAL_CUDA_FLOATING_CASES(dtype, T, ...)                             \
  TIDAL_CUDA_CASE(::tidal::DType::f32, float, T, __VA_ARGS__)                \
  TIDAL_CUDA_CASE(::tidal::DType::bf16, ::tidal::cuda::bf16, T, __VA_ARGS__) \
  TIDAL_CUDA_CASE(::tidal::DType::f64, double, T, __VA_ARGS__)

// Runs the statement with `T` the element type of a floating dtype (f32, bf16, f64).
#define TIDAL_CUDA_FLOATING(dtype, kernel, T, ...)            \
  switch (dtype) {                                            \
    TIDAL_CUDA_FLOATING_CASES(dtype, T, __VA_ARGS__)          \
    default: ::tidal::cuda::unsupported_dtype(kernel, dtype); \
  }
