#pragma once
// CPU kernels of the elementwise family. Outputs are preallocated by the op layer; inputs are
// broadcast to the output's shape and may have any strides.
#include <cstdint>

#include "tidal/backend/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

void unary(Unary op, const Tensor& out, const Tensor& in, double s = 0.0);

// out = a op (alpha * b) for add/sub; alpha is ignored by the others.
void binary(Binary op, const Tensor& out, const Tensor& a, const Tensor& b, double alpha = 1.0);

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
