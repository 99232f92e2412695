#pragma once
// The elementwise family's launchers (elementwise.cu), called by elementwise.cpp, random.cpp and
// activation.cpp. Every Strided is viewed with the output's shape (inputs broadcast); n is the output's
// element count. Floating inputs compute in f32 (bf16, f32) or f64, integers in their own type, as the
// CPU backend (backend/cpu/elementwise.cpp); bf16 results round to nearest even.
#include <cuda_runtime_api.h>

#include "tidal/backend/cuda/strided.h"
#include "tidal/seam/kernel_args.h"

namespace tidal::cuda {

// dst[i] = value (converted to dst's dtype; bf16 rounded to nearest even), over dst's n elements.
void launch_fill(cudaStream_t stream, const Strided& dst, int64_t n, double value);

// out = op(in, s); out and in share a dtype. Integer dtypes take neg, abs, add/mul/rsub_scalar,
// clamp_min/max and square only (elementwise.cpp checks).
void launch_unary(cudaStream_t stream, Unary op, const Strided& out, const Strided& in, int64_t n, double s);
// out = a op (alpha * b) for add and sub, a op b for the others; one dtype (pow: floating only).
void launch_binary(cudaStream_t stream, Binary op, const Strided& out, const Strided& a, const Strided& b, int64_t n,
                   double alpha);
// out (u8) = a op b (a and b of one dtype), or a op s.
void launch_compare(cudaStream_t stream, Compare op, const Strided& out, const Strided& a, const Strided& b, int64_t n);
void launch_compare_scalar(cudaStream_t stream, Compare op, const Strided& out, const Strided& a, int64_t n, double s);
// out = cond (u8) ? a : b; out, a and b of one dtype.
void launch_where(cudaStream_t stream, const Strided& out, const Strided& cond, const Strided& a, const Strided& b,
                  int64_t n);
// out = mask (u8) ? value : x; out and x of one dtype.
void launch_masked_fill(cudaStream_t stream, const Strided& out, const Strided& x, const Strided& mask, int64_t n,
                        double value);
// dst = src converted to dst's dtype (the CPU backend's conversions).
void launch_copy(cudaStream_t stream, const Strided& dst, const Strided& src, int64_t n);

}  // namespace tidal::cuda
