#pragma once
// Reductions. Results are deterministic: the summation order depends only on the shapes, never on
// the number of threads.
#include <vector>

#include "tidal/tensor.h"

namespace tidal {

Tensor sum(const Tensor& t);  // all elements, a 0-dim tensor
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& t);
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim = false);

struct MaxResult {
  Tensor values;
  Tensor indices;  // i64, first occurrence of the maximum
};
MaxResult max(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& t);  // all elements, a 0-dim tensor

// Sums `t` down to `shape` (the inverse of broadcasting `shape` to t's shape).
Tensor sum_to(const Tensor& t, const Shape& shape);

}  // namespace tidal
