#pragma once
// The index family's launchers (index.cu: gather, scatter_add, range checks, bincount; index_sort.cu:
// topk, argsort), called by index.cpp. Plain C++.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "tidal/backend/cuda/strided.h"
#include "tidal/dtype.h"

namespace tidal::cuda {

// An iteration shape split at `dim` (row-major), and an operand's element strides over it.
struct IndexShape {
  int ndim = 0;
  int dim = 0;
  int64_t sizes[kMaxDims] = {};
};
struct IndexOperand {
  void* data = nullptr;
  int64_t strides[kMaxDims] = {};
};

// out[o, j, i] = x[o, index[o, j, i], i] over `iter` (numel elements of `itemsize` bytes, moved as bits).
void launch_gather(cudaStream_t stream, const IndexShape& iter, int64_t numel, const IndexOperand& out,
                   const IndexOperand& x, const IndexOperand& index, int64_t itemsize, DType index_dtype);
// out[o, index[o, j, i], i] += src[o, j, i] over `iter`: one thread per (o, i), adding over j in order
// (the CPU backend's order: the same bits).
void launch_scatter_add_direct(cudaStream_t stream, const IndexShape& iter, const IndexOperand& out,
                               const IndexOperand& src, const IndexOperand& index, DType dtype, DType index_dtype);
// The same when iter.dim == 0 and the index does not vary over the inner dims (index_add over rows,
// the MoE combine): the n sources are stably sorted by target row, then one thread per (target row p,
// inner position) adds its sources in increasing j: the CPU's order again. `rows` = out's size along
// dim; scratch of scatter_add_sorted_scratch(n, rows) bytes.
size_t scatter_add_sorted_scratch(int64_t n, int64_t rows);
void launch_scatter_add_sorted(cudaStream_t stream, const IndexShape& iter, const IndexOperand& out,
                               const IndexOperand& src, const IndexOperand& index, DType dtype, DType index_dtype,
                               int64_t rows, void* scratch, size_t scratch_bytes);

// The first position of the contiguous index (n) outside [0, limit), or -1; scratch: 1 device int64.
// Synchronizes the stream.
int64_t launch_first_out_of_range(cudaStream_t stream, const void* index, DType index_dtype, int64_t n, int64_t limit,
                                  int64_t* scratch);
// The largest value of the contiguous index (n > 0), the smallest into *min_out when not null; scratch:
// 2 device int64. Synchronizes the stream.
int64_t launch_index_max(cudaStream_t stream, const void* index, DType index_dtype, int64_t n, int64_t* min_out,
                         int64_t* scratch);
// counts (length, i64, zeroed) [v] += 1 for each value v of the contiguous index (n, in range).
void launch_bincount(cudaStream_t stream, int64_t* counts, int64_t length, const void* index, DType index_dtype,
                     int64_t n);

// Rows of a tensor split at one dim: `rows` (the other dims' sizes and strides; rows.offset(r) is the
// first element of row r = o * inner + i), n elements along the dim at dim_stride.
struct SortRows {
  Strided rows;
  int64_t count = 0;  // rows
  int64_t n = 0;
  int64_t dim_stride = 0;
};
// topk for k <= kSmallTopK: one thread per row, the CPU's selection (ties: lower position first; NaN
// largest); values/indices contiguous (outer, k, inner).
inline constexpr int64_t kSmallTopK = 16;
void launch_topk_small(cudaStream_t stream, const SortRows& x, int64_t inner, int64_t k, bool largest, bool sorted,
                       void* values, int64_t* indices);
// order (count, n) contiguous = each row's positions stably sorted by value (NaN largest, -0 == +0).
size_t sort_rows_scratch(DType dtype, int64_t count, int64_t n);
void launch_sort_rows(cudaStream_t stream, const SortRows& x, bool descending, int64_t* order, void* scratch,
                      size_t scratch_bytes);
// indices (outer, n, inner) contiguous from order (count, n).
void launch_order_to_indices(cudaStream_t stream, const int64_t* order, int64_t count, int64_t n, int64_t inner,
                             int64_t* indices);
// topk's outputs (outer, k, inner) from order (count, n): its first k positions, or with !sorted the same
// positions in increasing order (mask: count * n device bytes).
void launch_topk_from_order(cudaStream_t stream, const SortRows& x, const int64_t* order, int64_t inner, int64_t k,
                            bool sorted, uint8_t* mask, void* values, int64_t* indices);

}  // namespace tidal::cuda
