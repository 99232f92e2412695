// The index family's methods of CudaKernels: the iteration shapes and operands (the CPU backend's
// index.h split at `dim`), scratch through tidal's allocator, then index.cu's and index_sort.cu's
// launchers.
#include <algorithm>

#include "tidal/backend/cuda/index_launch.h"
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/scratch.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

// Sources per output element from which scatter_add sorts the index (one thread per output element
// then) rather than looping over every source in each (output position) thread.
constexpr int64_t kSortedScatterMin = 64;

// `iter` split at `dim` with the operands' strides over it; size-1 dims other than `dim` dropped.
struct IndexCall {
  IndexShape shape;
  IndexOperand ops[3];
};
IndexCall index_call(const Shape& iter, int dim, const Tensor* const (&ts)[3]) {
  IndexCall c;
  int n = 0;
  for (int d = 0; d < iter.size(); ++d) {
    if (iter[d] == 1 && d != dim) continue;
    TIDAL_CHECK(n < kMaxDims, "[cuda] an index op over ", iter, ": more than ", kMaxDims,
                " dims of size > 1; make it contiguous and reshape first");
    if (d == dim) c.shape.dim = n;
    c.shape.sizes[n] = iter[d];
    for (int k = 0; k < 3; ++k) c.ops[k].strides[n] = ts[k]->strides()[d];
    ++n;
  }
  c.shape.ndim = n;
  for (int k = 0; k < 3; ++k) c.ops[k].data = device_data(*ts[k]);
  return c;
}

// x split at `dim` into rows (the other dims) of n elements.
SortRows sort_rows(const Tensor& x, int dim) {
  SortRows r;
  r.rows.data = device_data(x);
  r.rows.dtype = x.dtype();
  r.n = x.shape()[dim];
  r.dim_stride = x.strides()[dim];
  r.count = 1;
  int n = 0;
  for (int d = 0; d < x.dim(); ++d) {
    if (d == dim || x.shape()[d] == 1) continue;
    TIDAL_CHECK(n < kMaxDims, "[cuda] topk/argsort over ", x.shape(), ": too many dims of size > 1");
    r.rows.sizes[n] = x.shape()[d];
    r.rows.strides[n] = x.strides()[d];
    r.count *= x.shape()[d];
    ++n;
  }
  r.rows.ndim = n;
  return r;
}

int64_t inner_of(const Tensor& x, int dim) {
  int64_t inner = 1;
  for (int d = dim + 1; d < x.dim(); ++d) inner *= x.shape()[d];
  return inner;
}

int64_t* i64_data(const Tensor& t) { return static_cast<int64_t*>(device_data(t)); }

}  // namespace

void CudaKernels::gather(Stream& stream, const Tensor& out, const Tensor& x, const Tensor& index, int dim) {
  const Shape& iter = out.shape();
  if (iter.numel() == 0) return;
  TIDAL_ASSERT(x.dtype() == out.dtype(), "gather: x ", x.dtype(), " into ", out.dtype());
  const IndexCall c = index_call(iter, dim, {&out, &x, &index});
  launch_gather(stream_handle(stream), c.shape, iter.numel(), c.ops[0], c.ops[1], c.ops[2], x.itemsize(),
                index.dtype());
}

// Deterministic: every out element receives its sources in increasing j (the CPU backend's order,
// so the same bits), by one of two schedules (index_launch.h).
void CudaKernels::scatter_add(Stream& stream, const Tensor& out, const Tensor& src, const Tensor& index, int dim) {
  const Shape& iter = index.shape();
  if (iter.numel() == 0) return;
  TIDAL_ASSERT(src.dtype() == out.dtype(), "scatter_add: src ", src.dtype(), " into ", out.dtype());
  const IndexCall c = index_call(iter, dim, {&out, &src, &index});
  bool sorted = c.shape.dim == 0 && iter[dim] >= kSortedScatterMin;                    // no outer dims, many sources
  for (int d = 1; d < c.shape.ndim && sorted; ++d) sorted = c.ops[2].strides[d] == 0;  // one index per row
  const cudaStream_t s = stream_handle(stream);
  if (!sorted) {
    launch_scatter_add_direct(s, c.shape, c.ops[0], c.ops[1], c.ops[2], out.dtype(), index.dtype());
    return;
  }
  const int64_t rows = out.shape()[dim];
  const size_t bytes = scatter_add_sorted_scratch(iter[dim], rows);
  Tensor scratch = scratch_bytes(out.device(), int64_t(bytes));
  launch_scatter_add_sorted(s, c.shape, c.ops[0], c.ops[1], c.ops[2], out.dtype(), index.dtype(), rows,
                            device_data(scratch), bytes);
}

int64_t CudaKernels::first_out_of_range(Stream& stream, const Tensor& index, int64_t limit) {
  TIDAL_ASSERT(index.is_contiguous(), "first_out_of_range needs a contiguous index, got strides ", index.strides());
  if (index.numel() == 0) return -1;
  Tensor scratch = scratch_bytes(index.device(), sizeof(int64_t));
  return launch_first_out_of_range(stream_handle(stream), device_data(index), index.dtype(), index.numel(), limit,
                                   i64_data(scratch));
}

int64_t CudaKernels::index_max(Stream& stream, const Tensor& index, int64_t* min_out) {
  TIDAL_ASSERT(index.is_contiguous() && index.numel() > 0, "index_max needs a contiguous non-empty index");
  Tensor scratch = scratch_bytes(index.device(), 2 * sizeof(int64_t));
  return launch_index_max(stream_handle(stream), device_data(index), index.dtype(), index.numel(), min_out,
                          i64_data(scratch));
}

// k <= kSmallTopK: the CPU's selection per row; larger k: a stable sort of each row, its first k.
void CudaKernels::topk(Stream& stream, const Tensor& values, const Tensor& indices, const Tensor& x, int dim, int64_t k,
                       bool largest, bool sorted) {
  if (values.numel() == 0) return;
  TIDAL_ASSERT(
      values.is_contiguous() && indices.is_contiguous() && indices.dtype() == DType::i64 && values.dtype() == x.dtype(),
      "topk writes contiguous values (x's dtype) and i64 indices");
  const SortRows rows = sort_rows(x, dim);
  const int64_t inner = inner_of(x, dim);
  const cudaStream_t s = stream_handle(stream);
  if (k <= kSmallTopK) {
    launch_topk_small(s, rows, inner, k, largest, sorted, device_data(values), i64_data(indices));
    return;
  }
  const size_t bytes = sort_rows_scratch(x.dtype(), rows.count, rows.n);
  Tensor scratch = scratch_bytes(x.device(), int64_t(bytes));
  Tensor order = scratch_bytes(x.device(), rows.count * rows.n * 8);
  Tensor mask = sorted ? Tensor() : scratch_bytes(x.device(), rows.count * rows.n);
  launch_sort_rows(s, rows, largest, i64_data(order), device_data(scratch), bytes);
  launch_topk_from_order(s, rows, i64_data(order), inner, k, sorted,
                         sorted ? nullptr : static_cast<uint8_t*>(device_data(mask)), device_data(values),
                         i64_data(indices));
}

void CudaKernels::argsort(Stream& stream, const Tensor& indices, const Tensor& x, int dim, bool descending) {
  if (x.numel() == 0) return;
  TIDAL_ASSERT(indices.is_contiguous() && indices.dtype() == DType::i64, "argsort writes contiguous i64 indices");
  const SortRows rows = sort_rows(x, dim);
  const int64_t inner = inner_of(x, dim);
  const cudaStream_t s = stream_handle(stream);
  const size_t bytes = sort_rows_scratch(x.dtype(), rows.count, rows.n);
  Tensor scratch = scratch_bytes(x.device(), int64_t(bytes));
  if (inner == 1) {  // (outer, n): the sorted order is the output
    launch_sort_rows(s, rows, descending, i64_data(indices), device_data(scratch), bytes);
    return;
  }
  Tensor order = scratch_bytes(x.device(), rows.count * rows.n * 8);
  launch_sort_rows(s, rows, descending, i64_data(order), device_data(scratch), bytes);
  launch_order_to_indices(s, i64_data(order), rows.count, rows.n, inner, i64_data(indices));
}

void CudaKernels::bincount(Stream& stream, const Tensor& counts, const Tensor& index) {
  TIDAL_ASSERT(index.is_contiguous() && counts.is_contiguous() && counts.dtype() == DType::i64,
               "bincount needs contiguous tensors (i64 counts)");
  launch_bincount(stream_handle(stream), i64_data(counts), counts.numel(), device_data(index), index.dtype(),
                  index.numel());
}

}  // namespace tidal::cuda
