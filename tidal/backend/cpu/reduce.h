#pragma once
// CPU reduction kernels over a contiguous input viewed as (outer, n, inner), reducing n.
#include <cstdint>

#include "tidal/tensor.h"

namespace tidal::cpu {

// out (outer, inner) = sum over n of x (outer, n, inner), times `scale`.
void sum_kernel(const Tensor& out, const Tensor& x, int64_t outer, int64_t n, int64_t inner, double scale);
// values/indices (outer, inner) = max and first argmax over n.
void max_kernel(const Tensor& values, const Tensor& indices, const Tensor& x, int64_t outer, int64_t n, int64_t inner);
// grad_in (outer, n, inner), zero-filled by the caller: grad_in[o, idx[o, j], j] = g[o, j].
void max_backward_kernel(const Tensor& grad_in, const Tensor& g, const Tensor& indices, int64_t outer, int64_t n,
                         int64_t inner);

}  // namespace tidal::cpu
