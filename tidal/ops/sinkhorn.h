#pragma once
// The Sinkhorn-Knopp projection of positive square matrices onto (nearly) doubly stochastic ones, as
// DeepSeek-V4's manifold-constrained hyper-connections (mHC) project their residual mapping: divide
// each column by (its sum + eps), then iters - 1 times each row and each column again. It saves only
// its input; the backward recomputes the iterations per matrix and differentiates them exactly.
#include <cstdint>

#include "tidal/tensor.h"

namespace tidal {

// x: (..., n, n), positive entries. iters >= 1, eps >= 0. Returns x's shape.
Tensor sinkhorn(const Tensor& x, int64_t iters, double eps);

}  // namespace tidal
