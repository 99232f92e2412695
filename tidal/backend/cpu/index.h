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

}  // namespace tidal::cpu
