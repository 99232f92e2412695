#pragma once
// CPU kernels of rotary position embedding (Hugging Face Llama layout: the two halves of the head
// dim are rotated against each other). See tidal/ops/rope.h.
#include <cstdint>

#include "tidal/tensor.h"

namespace tidal::cpu {

// cos/sin (T, D), contiguous, of a floating dtype: angle(t, i) = (position_offset + t) * theta^(-2(i mod D/2)/D),
// computed in f64 and rounded once to the tables' dtype.
void rope_tables_kernel(const Tensor& cos, const Tensor& sin, double theta, int64_t position_offset);

// out = x * cos + rotate_half(x) * sin, rotate_half(x) = cat(-x2, x1); with `transpose` the adjoint
// (the backward): out = x * cos + rotate_half^T(x * sin), rotate_half^T(y) = cat(y2, -y1).
// x and out (B, H, T, D) and cos/sin (T, D) may have any strides; one dtype for all four.
void rope_kernel(const Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, bool transpose);

}  // namespace tidal::cpu
