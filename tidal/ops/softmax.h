#pragma once
// softmax and log_softmax along one dim: numerically stable (the row max is subtracted) and saving
// only their output for backward. The last dim is the fast path; other dims run without a transpose.
#include <cstdint>

#include "tidal/tensor.h"

namespace tidal {

Tensor softmax(const Tensor& x, int64_t dim = -1);
Tensor log_softmax(const Tensor& x, int64_t dim = -1);

}  // namespace tidal
