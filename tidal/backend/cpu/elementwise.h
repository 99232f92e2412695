#pragma once
// CPU kernels of the elementwise family. Outputs are preallocated by the op layer; inputs are
// broadcast to the output's shape and may have any strides.
#include <cstdint>

#include "tidal/tensor.h"

namespace tidal::cpu {

enum class Unary : uint8_t {
  neg, exp, log, sqrt, rsqrt, abs, sign, tanh, sigmoid, relu, square, reciprocal, sin, cos,
  add_scalar,   // x + s
  mul_scalar,   // x * s
  rsub_scalar,  // s - x
  rdiv_scalar,  // s / x
  pow_scalar,   // x ^ s
  clamp_min,    // max(x, s)
  clamp_max,    // min(x, s)
};
void unary(Unary op, const Tensor& out, const Tensor& in, double s = 0.0);

enum class Binary : uint8_t { add, sub, mul, div, pow, maximum, minimum };
// out = a op (alpha * b) for add/sub; alpha is ignored by the others.
void binary(Binary op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0);

enum class Compare : uint8_t { eq, ne, lt, le, gt, ge };
// out (u8) = a op b.
void compare(Compare op, const Tensor& out, const Tensor& a, const Tensor& b);
// out (u8) = a op s.
void compare_scalar(Compare op, const Tensor& out, const Tensor& a, double s);

// out = cond ? a : b (cond is u8).
void where(const Tensor& out, const Tensor& cond, const Tensor& a, const Tensor& b);
// out = mask ? value : x (mask is u8).
void masked_fill(const Tensor& out, const Tensor& x, const Tensor& mask, double value);

// dst = src (broadcast, any strides, converting dtype).
void copy(const Tensor& dst, const Tensor& src);
void fill(const Tensor& dst, double value);
// dst += alpha * src, in place (src broadcast to dst).
void add_inplace(const Tensor& dst, const Tensor& src, double alpha);

}  // namespace tidal::cpu
