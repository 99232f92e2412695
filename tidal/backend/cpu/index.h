#pragma once
// CPU kernels of the index family (gather/scatter, index_select/index_add, topk, argsort, bincount).
// Gather and scatter loops run over an iteration shape split at `dim` into (outer, n, inner); every
// operand is addressed through element offsets of each outer and each inner position (so views of
// any strides need no copy) plus a stride along `dim`. Index values were range-checked by the op.
#include <cstdint>
#include <vector>

#include "tidal/tensor.h"

namespace tidal::cpu {

// An operand over an iteration shape split at `dim`, in elements.
struct IndexOperand {
  char* base = nullptr;  // first element
  int64_t itemsize = 0;
  int64_t dim_stride = 0;      // stride along `dim`
  std::vector<int64_t> outer;  // offset of each outer position (dims before `dim`, row-major)
  std::vector<int64_t> inner;  // offset of each inner position (dims after `dim`, row-major)
  bool inner_unit = false;     // inner[i] == i: the inner dims are one contiguous run
  bool inner_zero = false;     // inner[i] == 0: the operand does not vary over the inner dims
};

// `t` (or a broadcast view of it) seen over `iter` (same rank) split at `dim`; t's size along dims
// other than `dim` must be at least iter's.
IndexOperand index_operand(const Tensor& t, const Shape& iter, int dim);

// out[o, j, i] = x[o, index[o, j, i], i] over out's shape; out, x and index are operands over it.
void gather_kernel(const Tensor& out, const Tensor& x, const Tensor& index, int dim);
// out[o, index[o, j, i], i] += src[o, j, i] over index's shape. Every out element receives its
// contributions in increasing j, so the result is deterministic and independent of the threads
// (the loop runs in parallel over (o, i) only).
void scatter_add_kernel(const Tensor& out, const Tensor& src, const Tensor& index, int dim);

// Flat (row-major) position of the first element of `index` (i32/i64) outside [0, limit), or -1.
int64_t first_out_of_range(const Tensor& index, int64_t limit);

// values/indices (outer, k, inner) = the k largest (or smallest) of x (outer, n, inner) along the
// middle dim; ties go to the lower index and NaN counts as the largest value. `sorted`: in order
// of value, else in increasing index order. x may have any strides (an operand split at `dim`).
void topk_kernel(const Tensor& values, const Tensor& indices, const Tensor& x, int dim, int64_t k, bool largest,
                 bool sorted);
// indices (x's shape, i64) = a stable argsort of x along `dim` (NaN last ascending, first descending).
void argsort_kernel(const Tensor& indices, const Tensor& x, int dim, bool descending);
// counts (i64, zero-filled by the caller) [v] += 1 for every value v of index (1-D, in range).
void bincount_kernel(const Tensor& counts, const Tensor& index);
// The largest value of a non-empty index tensor (i32/i64), and the smallest through `min_out`.
int64_t index_max(const Tensor& index, int64_t* min_out);

}  // namespace tidal::cpu
