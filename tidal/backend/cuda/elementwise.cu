#include <cstring>

#include "tidal/backend/cuda/device_math.cuh"
#include "tidal/backend/cuda/elementwise_launch.h"
#include "tidal/backend/cuda/elementwise_loops.cuh"

namespace tidal::cuda {
namespace {

template <class T>
__global__ void fill_kernel(Strided dst, int64_t n, T value) {
  T* p = static_cast<T*>(dst.data);
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[dst.offset(i)] = value;
}

template <class T>
void fill_as(cudaStream_t stream, const Strided& dst, int64_t n, T value) {
  fill_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(dst, n, value);
  TIDAL_CUDA_CHECK_LAUNCH();
}

// --- the math of the ops, on f32 or f64
__device__ __forceinline__ float m_log(float x) { return logf(x); }
__device__ __forceinline__ double m_log(double x) { return ::log(x); }
__device__ __forceinline__ float m_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double m_sqrt(double x) { return ::sqrt(x); }
__device__ __forceinline__ float m_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double m_tanh(double x) { return ::tanh(x); }
// sin and cos through sincospi, which needs no large-argument reduction (sinf/sin would, in local
// memory): f32 in f64 (x / pi's rounding error is far below an f32 ulp), f64 with x / pi split into
// q + e (e the rounding error of q, by an FMA, plus 1/pi's low part), sin(x) = sinpi(q) + cospi(q) pi e.
__device__ __forceinline__ void m_sincos(double x, double* s, double* c) {
  constexpr double kInvPiHi = 0.31830988618379069, kInvPiLo = -1.9678676675182486e-17;
  const double q = x * kInvPiHi, e = ::fma(x, kInvPiHi, -q) + x * kInvPiLo;
  double sq = 0, cq = 0;
  ::sincospi(q, &sq, &cq);
  const double d = 3.141592653589793 * e;
  *s = sq + cq * d;
  *c = cq - sq * d;
}
__device__ __forceinline__ float m_sin(float x) {
  double s = 0, c = 0;
  ::sincospi(double(x) * 0.318309886183790671537767526745, &s, &c);
  return float(s);
}
__device__ __forceinline__ float m_cos(float x) {
  double s = 0, c = 0;
  ::sincospi(double(x) * 0.318309886183790671537767526745, &s, &c);
  return float(c);
}
__device__ __forceinline__ double m_sin(double x) {
  double s = 0, c = 0;
  m_sincos(x, &s, &c);
  return s;
}
__device__ __forceinline__ double m_cos(double x) {
  double s = 0, c = 0;
  m_sincos(x, &s, &c);
  return c;
}
__device__ __forceinline__ float m_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double m_pow(double x, double y) { return ::pow(x, y); }
__device__ __forceinline__ float m_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double m_abs(double x) { return ::fabs(x); }

// Floating unary ops (A: f32 or f64), as backend/cpu/elementwise.cpp unary_typed.
template <class A, Unary OP>
struct UnaryFloat {
  A s;
  __device__ __forceinline__ A operator()(A x) const {
    if constexpr (OP == Unary::neg) return -x;
    if constexpr (OP == Unary::exp) return fast_exp(x);
    if constexpr (OP == Unary::log) return m_log(x);
    if constexpr (OP == Unary::sqrt) return m_sqrt(x);
    if constexpr (OP == Unary::rsqrt) return A(1) / m_sqrt(x);
    if constexpr (OP == Unary::abs) return m_abs(x);
    if constexpr (OP == Unary::sign) return A((x > A(0)) - (x < A(0)));
    if constexpr (OP == Unary::tanh) return m_tanh(x);
    if constexpr (OP == Unary::sigmoid) return fast_sigmoid(x);
    if constexpr (OP == Unary::relu) return x > A(0) ? x : A(0);
    if constexpr (OP == Unary::square) return x * x;
    if constexpr (OP == Unary::reciprocal) return A(1) / x;
    if constexpr (OP == Unary::sin) return m_sin(x);
    if constexpr (OP == Unary::cos) return m_cos(x);
    if constexpr (OP == Unary::add_scalar) return x + s;
    if constexpr (OP == Unary::mul_scalar) return x * s;
    if constexpr (OP == Unary::rsub_scalar) return s - x;
    if constexpr (OP == Unary::rdiv_scalar) return s / x;
    if constexpr (OP == Unary::pow_scalar) return m_pow(x, s);
    if constexpr (OP == Unary::clamp_min) return x < s ? s : x;
    if constexpr (OP == Unary::clamp_max) return x > s ? s : x;
  }
};

// Integer unary ops (T: the integer type), as CpuKernels::unary.
template <class T, Unary OP>
struct UnaryInt {
  T s;
  __device__ __forceinline__ T operator()(T x) const {
    if constexpr (OP == Unary::neg) return T(-x);
    if constexpr (OP == Unary::abs) {
      if constexpr (std::is_unsigned_v<T>)
        return x;
      else
        return T(x < 0 ? -x : x);
    }
    if constexpr (OP == Unary::add_scalar) return T(x + s);
    if constexpr (OP == Unary::mul_scalar) return T(x * s);
    if constexpr (OP == Unary::rsub_scalar) return T(s - x);
    if constexpr (OP == Unary::clamp_min) return x < s ? s : x;
    if constexpr (OP == Unary::clamp_max) return x > s ? s : x;
    if constexpr (OP == Unary::square) return T(x * x);
    return x;  // other ops: rejected by elementwise.cpp
  }
};

template <class T, Unary OP>
void unary_as(cudaStream_t stream, const Strided& out, const Strided& in, int64_t n, double s) {
  const Strided ins[1] = {in};
  if constexpr (std::is_integral_v<T>) {
    run_map<T, T, 1>(stream, out, ins, n, UnaryInt<T, OP>{T(s)});
  } else {
    using A = acc_t<T>;
    run_map<T, T, 1>(stream, out, ins, n, UnaryFloat<A, OP>{A(s)});
  }
}

template <class T>
void unary_typed(cudaStream_t stream, Unary op, const Strided& out, const Strided& in, int64_t n, double s) {
#define TIDAL_UNARY_CASE(name) \
  case Unary::name: return unary_as<T, Unary::name>(stream, out, in, n, s);
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      TIDAL_UNARY_CASE(neg)
      TIDAL_UNARY_CASE(abs)
      TIDAL_UNARY_CASE(add_scalar)
      TIDAL_UNARY_CASE(mul_scalar)
      TIDAL_UNARY_CASE(rsub_scalar)
      TIDAL_UNARY_CASE(clamp_min)
      TIDAL_UNARY_CASE(clamp_max)
      TIDAL_UNARY_CASE(square)
      default: return;
    }
  } else {
    switch (op) {
      TIDAL_UNARY_CASE(neg)
      TIDAL_UNARY_CASE(exp)
      TIDAL_UNARY_CASE(log)
      TIDAL_UNARY_CASE(sqrt)
      TIDAL_UNARY_CASE(rsqrt)
      TIDAL_UNARY_CASE(abs)
      TIDAL_UNARY_CASE(sign)
      TIDAL_UNARY_CASE(tanh)
      TIDAL_UNARY_CASE(sigmoid)
      TIDAL_UNARY_CASE(relu)
      TIDAL_UNARY_CASE(square)
      TIDAL_UNARY_CASE(reciprocal)
      TIDAL_UNARY_CASE(sin)
      TIDAL_UNARY_CASE(cos)
      TIDAL_UNARY_CASE(add_scalar)
      TIDAL_UNARY_CASE(mul_scalar)
      TIDAL_UNARY_CASE(rsub_scalar)
      TIDAL_UNARY_CASE(rdiv_scalar)
      TIDAL_UNARY_CASE(clamp_min)
      TIDAL_UNARY_CASE(clamp_max)
      case Unary::pow_scalar:  // the CPU's special cases
        if (s == 2.0) return unary_as<T, Unary::square>(stream, out, in, n, s);
        if (s == 0.5) return unary_as<T, Unary::sqrt>(stream, out, in, n, s);
        return unary_as<T, Unary::pow_scalar>(stream, out, in, n, s);
    }
  }
#undef TIDAL_UNARY_CASE
}

// Binary ops: W is the work type (f32/f64 for floating, the integer type for integers). ONE: alpha is 1
// (the CPU's x + y without the product).
template <class W, Binary OP, bool ONE>
struct BinaryOp {
  W alpha;
  __device__ __forceinline__ W operator()(W x, W y) const {
    if constexpr (std::is_integral_v<W>) {
      if constexpr (OP == Binary::add) return W(x + alpha * y);
      if constexpr (OP == Binary::sub) return W(x - alpha * y);
      if constexpr (OP == Binary::mul) return W(x * y);
      if constexpr (OP == Binary::div) return y == 0 ? W(0) : W(x / y);
    } else {
      if constexpr (OP == Binary::add) return ONE ? x + y : x + alpha * y;
      if constexpr (OP == Binary::sub) return ONE ? x - y : x - alpha * y;
      if constexpr (OP == Binary::mul) return x * y;
      if constexpr (OP == Binary::div) return x / y;
      if constexpr (OP == Binary::pow) return m_pow(x, y);
    }
    if constexpr (OP == Binary::maximum) return x < y ? y : x;
    if constexpr (OP == Binary::minimum) return y < x ? y : x;
    return x;  // integer pow: rejected by elementwise.cpp
  }
};

template <class T, Binary OP>
void binary_as(cudaStream_t stream, const Strided& out, const Strided& a, const Strided& b, int64_t n, double alpha) {
  using W = work_t<T>;
  const Strided ins[2] = {a, b};
  if constexpr (!std::is_integral_v<W> && (OP == Binary::add || OP == Binary::sub)) {
    if (alpha != 1.0) return run_map<T, T, 2>(stream, out, ins, n, BinaryOp<W, OP, false>{W(alpha)});
  }
  run_map<T, T, 2>(stream, out, ins, n, BinaryOp<W, OP, true>{W(alpha)});
}

template <class T>
void binary_typed(cudaStream_t stream, Binary op, const Strided& out, const Strided& a, const Strided& b, int64_t n,
                  double alpha) {
  switch (op) {
    case Binary::add: return binary_as<T, Binary::add>(stream, out, a, b, n, alpha);
    case Binary::sub: return binary_as<T, Binary::sub>(stream, out, a, b, n, alpha);
    case Binary::mul: return binary_as<T, Binary::mul>(stream, out, a, b, n, 1.0);
    case Binary::div: return binary_as<T, Binary::div>(stream, out, a, b, n, 1.0);
    case Binary::pow:
      if constexpr (!std::is_integral_v<T>) return binary_as<T, Binary::pow>(stream, out, a, b, n, 1.0);
      return;
    case Binary::maximum: return binary_as<T, Binary::maximum>(stream, out, a, b, n, 1.0);
    case Binary::minimum: return binary_as<T, Binary::minimum>(stream, out, a, b, n, 1.0);
  }
}

template <class W, Compare OP>
__device__ __forceinline__ uint8_t compare_op(W x, W y) {
  if constexpr (OP == Compare::eq) return uint8_t(x == y);
  if constexpr (OP == Compare::ne) return uint8_t(x != y);
  if constexpr (OP == Compare::lt) return uint8_t(x < y);
  if constexpr (OP == Compare::le) return uint8_t(x <= y);
  if constexpr (OP == Compare::gt) return uint8_t(x > y);
  if constexpr (OP == Compare::ge) return uint8_t(x >= y);
}

template <class W, Compare OP>
struct CompareOp {
  __device__ __forceinline__ uint8_t operator()(W x, W y) const { return compare_op<W, OP>(x, y); }
};
template <class W, Compare OP>
struct CompareScalarOp {
  W s;
  __device__ __forceinline__ uint8_t operator()(W x) const { return compare_op<W, OP>(x, s); }
};

// Runs f.template operator()<OP>() for the op's value.
template <class F>
void with_compare(Compare op, const F& f) {
  switch (op) {
    case Compare::eq: return f.template operator()<Compare::eq>();
    case Compare::ne: return f.template operator()<Compare::ne>();
    case Compare::lt: return f.template operator()<Compare::lt>();
    case Compare::le: return f.template operator()<Compare::le>();
    case Compare::gt: return f.template operator()<Compare::gt>();
    case Compare::ge: return f.template operator()<Compare::ge>();
  }
}

template <class W>
struct Identity {
  __device__ __forceinline__ W operator()(W x) const { return x; }
};

// Same-dtype selection by storage width: the bits move unchanged.
template <class U>
__global__ void where_kernel(Strided out, Strided cond, Strided a, Strided b, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const bool c = static_cast<const uint8_t*>(cond.data)[at(cond, i)] != 0;
    static_cast<U*>(out.data)[at(out, i)] =
        c ? static_cast<const U*>(a.data)[at(a, i)] : static_cast<const U*>(b.data)[at(b, i)];
  }
}

template <class U>
__global__ void masked_fill_kernel(Strided out, Strided x, Strided mask, int64_t n, U value) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const bool m = static_cast<const uint8_t*>(mask.data)[at(mask, i)] != 0;
    static_cast<U*>(out.data)[at(out, i)] = m ? value : static_cast<const U*>(x.data)[at(x, i)];
  }
}

template <class U>
__global__ void copy_bits_kernel(Strided dst, Strided src, int64_t n) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    static_cast<U*>(dst.data)[at(dst, i)] = static_cast<const U*>(src.data)[at(src, i)];
}

// The bits of value in dtype t as the CPU backend converts it (T(acc_t<T>(value)); bf16 rounded to
// nearest even from f32), zero-extended.
uint64_t host_bits(DType t, double value) {
  uint64_t bits = 0;
  switch (t) {
    case DType::f32: {
      const float f = float(value);
      std::memcpy(&bits, &f, 4);
      break;
    }
    case DType::bf16: {
      const float f = float(value);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
      bits = (u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded;
      break;
    }
    case DType::f64: std::memcpy(&bits, &value, 8); break;
    case DType::i32: bits = uint32_t(int32_t(value)); break;
    case DType::i64: bits = uint64_t(int64_t(value)); break;
    case DType::u8: bits = uint8_t(value); break;
  }
  return bits;
}

}  // namespace

void launch_fill(cudaStream_t stream, const Strided& dst, int64_t n, double value) {
  if (n == 0) return;
  switch (dst.dtype) {
    case DType::f32: return fill_as(stream, dst, n, float(value));
    case DType::bf16: return fill_as(stream, dst, n, __float2bfloat16_rn(float(value)));
    case DType::f64: return fill_as(stream, dst, n, value);
    case DType::i32: return fill_as(stream, dst, n, int32_t(value));
    case DType::i64: return fill_as(stream, dst, n, int64_t(value));
    case DType::u8: return fill_as(stream, dst, n, uint8_t(value));
  }
}

void launch_unary(cudaStream_t stream, Unary op, const Strided& out, const Strided& in, int64_t n, double s) {
  if (n == 0) return;
  TIDAL_CUDA_ALL(in.dtype, T, unary_typed<T>(stream, op, out, in, n, s));
}

void launch_binary(cudaStream_t stream, Binary op, const Strided& out, const Strided& a, const Strided& b, int64_t n,
                   double alpha) {
  if (n == 0) return;
  TIDAL_CUDA_ALL(a.dtype, T, binary_typed<T>(stream, op, out, a, b, n, alpha));
}

void launch_compare(cudaStream_t stream, Compare op, const Strided& out, const Strided& a, const Strided& b,
                    int64_t n) {
  if (n == 0) return;
  const Strided ins[2] = {a, b};
  TIDAL_CUDA_ALL(a.dtype, T, with_compare(op, [&]<Compare OP>() {
                   run_map<uint8_t, T, 2>(stream, out, ins, n, CompareOp<work_t<T>, OP>{});
                 }));
}

void launch_compare_scalar(cudaStream_t stream, Compare op, const Strided& out, const Strided& a, int64_t n, double s) {
  if (n == 0) return;
  const Strided ins[1] = {a};
  TIDAL_CUDA_ALL(a.dtype, T, with_compare(op, [&]<Compare OP>() {
                   using W = work_t<T>;
                   run_map<uint8_t, T, 1>(stream, out, ins, n, CompareScalarOp<W, OP>{W(s)});
                 }));
}

void launch_where(cudaStream_t stream, const Strided& out, const Strided& cond, const Strided& a, const Strided& b,
                  int64_t n) {
  if (n == 0) return;
  switch (dtype_size(out.dtype)) {
    case 1: where_kernel<uint8_t><<<grid_for(n), kThreads, 0, stream>>>(out, cond, a, b, n); break;
    case 2: where_kernel<uint16_t><<<grid_for(n), kThreads, 0, stream>>>(out, cond, a, b, n); break;
    case 4: where_kernel<uint32_t><<<grid_for(n), kThreads, 0, stream>>>(out, cond, a, b, n); break;
    default: where_kernel<uint64_t><<<grid_for(n), kThreads, 0, stream>>>(out, cond, a, b, n); break;
  }
  TIDAL_CUDA_CHECK_LAUNCH();
}

void launch_masked_fill(cudaStream_t stream, const Strided& out, const Strided& x, const Strided& mask, int64_t n,
                        double value) {
  if (n == 0) return;
  const uint64_t v = host_bits(out.dtype, value);
  switch (dtype_size(out.dtype)) {
    case 1: masked_fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, x, mask, n, uint8_t(v)); break;
    case 2: masked_fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, x, mask, n, uint16_t(v)); break;
    case 4: masked_fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, x, mask, n, uint32_t(v)); break;
    default: masked_fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, x, mask, n, v); break;
  }
  TIDAL_CUDA_CHECK_LAUNCH();
}

void launch_copy(cudaStream_t stream, const Strided& dst, const Strided& src, int64_t n) {
  if (n == 0) return;
  if (dst.dtype == src.dtype) {
    if (is_flat(dst) && is_flat(src)) {
      if (dst.data != src.data)
        TIDAL_CUDA_CHECK(
            cudaMemcpyAsync(dst.data, src.data, size_t(n * dtype_size(dst.dtype)), cudaMemcpyDeviceToDevice, stream));
      return;
    }
    switch (dtype_size(dst.dtype)) {
      case 1: copy_bits_kernel<uint8_t><<<grid_for(n), kThreads, 0, stream>>>(dst, src, n); break;
      case 2: copy_bits_kernel<uint16_t><<<grid_for(n), kThreads, 0, stream>>>(dst, src, n); break;
      case 4: copy_bits_kernel<uint32_t><<<grid_for(n), kThreads, 0, stream>>>(dst, src, n); break;
      default: copy_bits_kernel<uint64_t><<<grid_for(n), kThreads, 0, stream>>>(dst, src, n); break;
    }
    TIDAL_CUDA_CHECK_LAUNCH();
    return;
  }
  const Strided ins[1] = {src};
  TIDAL_CUDA_ALL(src.dtype, S,
                 TIDAL_CUDA_ALL(dst.dtype, D, run_map<D, S, 1>(stream, dst, ins, n, Identity<work_t<S>>{})));
}

}  // namespace tidal::cuda
