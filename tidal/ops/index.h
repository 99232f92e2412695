#pragma once
// Indexing ops: topk, gather/scatter_add, index_select/index_add, argsort, bincount (what MoE
// routing needs). Index tensors are i32 or i64 and never get gradients; every index is checked
// against its range before anything is written, and a bad one is reported with its value, its
// position and the valid range. Accumulating ops are deterministic: duplicates add up in index
// order, whatever the number of threads. See tests/gradcheck/index_test.cpp for the MoE dance.
#include <cstdint>
#include <string>

#include "tidal/tensor.h"

namespace tidal {

struct TopKResult {
  Tensor values;   // x's dtype, x's shape with `dim` of size k; differentiable
  Tensor indices;  // i64, positions along `dim`
};
// The k largest (or smallest) entries of x along `dim`. Ties go to the lower index and NaN counts as
// the largest value. `sorted`: best first; otherwise in increasing index order (deterministic).
TopKResult topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);

// out[i][j][k] = x[i][index[i][j][k]][k] for dim = 1 (PyTorch semantics): index has x's rank, is no
// larger than x outside `dim`, and out has index's shape. Backward scatter-adds into zeros.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// self + src scattered along `dim`: out[i][index[i][j][k]][k] += src[i][j][k] for dim = 1
// (out-of-place). Differentiable w.r.t. self (identity) and src (a gather of the gradient).
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

// The slices x.select(dim, index[j]) stacked along `dim`; index is 1-D (or a scalar: one slice).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// self + src added into the slices index[j] along `dim` (out-of-place); src has self's shape with
// `dim` of size len(index).
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

// i64 positions that sort x along `dim`; stable (equal values keep their order), NaN last ascending
// and first descending. Any dtype; no gradient.
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// i64 counts of each value of a 1-D non-negative index, of length max(max + 1, minlength). On the
// meta device (no values) the length is minlength: pass the number of bins there.
Tensor bincount(const Tensor& index, int64_t minlength = 0);

namespace detail {
// Throws "[op] <what> <value> at position (..) of the (..) <what> tensor is out of range [0, limit)
// <context>" for the first index outside [0, limit), after checking the index is i32/i64. Skips
// the values of meta tensors. Shared with embedding.
void check_index_range(const char* op, const Tensor& index, int64_t limit, const char* what,
                       const std::string& context = {});
}  // namespace detail

}  // namespace tidal
