#pragma once
// How a batched matrix product's operands lie in memory, for every backend's matmul: the element
// strides of their batch dims and whether a batch folds into the row dim (one large product).
#include <cstdint>
#include <vector>

#include "tidal/shape.h"

namespace tidal {
class Tensor;
}

namespace tidal::backend {

// Element strides of the batch dims of `t` (..., rows, cols) broadcast to `batch` (0 where broadcast).
std::vector<int64_t> batch_strides(const Tensor& t, const Shape& batch);

// Whether the batch dims of `a` fold into its row dim: a (..., m, k) is then one (B*m, k) matrix.
bool rows_fold(const Tensor& a, const Shape& batch);

}  // namespace tidal::backend
