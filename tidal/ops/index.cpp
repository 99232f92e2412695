#include "tidal/ops/index.h"

#include <limits>

#include "tidal/ops/common.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

void check_index_dtype(const char* op, const Tensor& index) {
  detail::check_defined(op, index, "the index");
  TIDAL_CHECK(index.dtype() == DType::i32 || index.dtype() == DType::i64, "[", op,
              "] the index must be i32 or i64, got ", index.dtype(), " ", index.shape());
}

std::string position_str(const Shape& shape, int64_t flat) {
  Shape pos;
  pos.resize(shape.size());
  for (int d = shape.size() - 1; d >= 0; --d) {
    pos[d] = flat % shape[d];
    flat /= shape[d];
  }
  return pos.str();
}

// A 1-D (or scalar) index seen over the iteration shape `iter`: it varies along `dim` only.
Tensor broadcast_index(const Tensor& index, const Shape& iter, int dim) {
  Shape strides;
  strides.resize(iter.size(), 0);
  strides[dim] = index.dim() == 1 ? index.strides()[0] : 0;
  return Tensor(index.storage(), iter, strides, index.offset(), index.dtype());
}

// No-autograd building blocks, shared by forwards and backwards.
// out (index_iter's shape) = x gathered along `dim`.
Tensor gather_raw(const Tensor& x, int dim, const Tensor& index_iter) {
  Tensor out = empty(index_iter.shape(), x.dtype(), x.device());
  if (Kernels* kern = kernels_for(out)) kern->gather(current_stream(out.device()), out, x.detach(), index_iter, dim);
  return out;
}
// zeros(shape) with src (index_iter's shape) scatter-added along `dim`.
Tensor scatter_into_zeros(const Shape& shape, int dim, const Tensor& index_iter, const Tensor& src) {
  Tensor out = zeros(shape, src.dtype(), src.device());
  if (Kernels* kern = kernels_for(out))
    kern->scatter_add(current_stream(out.device()), out, src.detach(), index_iter, dim);
  return out;
}
// base + src scatter-added along `dim` (out-of-place).
Tensor scatter_into_copy(const Tensor& base, int dim, const Tensor& index_iter, const Tensor& src) {
  Tensor out = empty(base.shape(), base.dtype(), base.device());
  Kernels* kern = kernels_for(out);
  if (kern != nullptr && out.numel() > 0) {
    kern->copy(current_stream(out.device()), out, base.detach());
    kern->scatter_add(current_stream(out.device()), out, src.detach(), index_iter, dim);
  }
  return out;
}
// t placed at the start of zeros(shape) (t is no larger than shape in any dim).
Tensor pad_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Tensor out = zeros(shape, t.dtype(), t.device());
  if (t.numel() == 0) return out;
  Tensor piece = out;
  for (int d = 0; d < shape.size(); ++d) piece = piece.narrow(d, 0, t.shape()[d]);
  piece.copy_(t);
  return out;
}

// What the backwards of the indexed ops keep: the index (a 1-D one when `broadcast`), the dim, and
// the shape of the input the gradient is for.
struct IndexedBackward : Node {
  const char* node_name = "";
  Shape shape;
  int dim = 0;
  bool broadcast = false;  // index_select / index_add
  SavedTensor index;
  const char* name() const override { return node_name; }
  void release_saved() override { index.reset(); }
  // The index over the iteration shape `iter`.
  Tensor index_over(const Shape& iter) const {
    Tensor idx = index.unpack(name());
    return broadcast ? broadcast_index(idx, iter, dim) : idx;
  }
};

// gather, index_select and topk: scatter the gradient into zeros of x's shape.
struct ScatterGradBackward : IndexedBackward {
  TensorList apply(TensorList&& g) override { return {scatter_into_zeros(shape, dim, index_over(g[0].shape()), g[0])}; }
};

// scatter_add and index_add: identity for self, a gather of the gradient for src (of `shape`).
struct ScatterAddBackward : IndexedBackward {
  TensorList apply(TensorList&& g) override {
    Tensor gsrc;
    if (needs_input_grad(1)) gsrc = pad_to(gather_raw(g[0], dim, index_over(shape)), shape);
    return {needs_input_grad(0) ? g[0] : Tensor(), gsrc};
  }
};

// Checks every indexed op starts with (index dtype and device, the data's rank); returns the dim.
int check_indexed(const char* op, const Tensor& data, const char* data_name, const Tensor& index, int64_t dim) {
  check_index_dtype(op, index);
  detail::check_same_device(op, data, index);
  TIDAL_CHECK(data.dim() >= 1, "[", op, "] ", data_name, " must have at least 1 dim, got a scalar ", data.shape());
  return normalize_dim(dim, data.dim(), op);
}

// Every index must address a slice of `data` along `dim`.
void check_range(const char* op, const Tensor& index, const Tensor& data, const char* data_name, int dim) {
  detail::check_index_range(op, index, data.shape()[dim], "index",
                            detail::str_cat(" (dim ", dim, " of ", data_name, " ", data.shape(), ")"));
}

// Backward of gather, index_select (broadcast: a 1-D index) and topk's values (output `nr`).
void record_scatter_grad(const Tensor& out, const Tensor& x, const char* name, int dim, bool broadcast,
                         const Tensor& index, uint32_t nr = 0) {
  auto node = autograd::make_node<ScatterGradBackward>({&x});
  node->node_name = name;
  node->shape = x.shape();
  node->dim = dim;
  node->broadcast = broadcast;
  node->index = SavedTensor(index);
  autograd::set_history(out, node, nr);
}

// Backward of scatter_add and index_add (broadcast: a 1-D index).
void record_scatter_add_grad(const Tensor& out, const Tensor& self, const Tensor& src, const char* name, int dim,
                             bool broadcast, const Tensor& index) {
  auto node = autograd::make_node<ScatterAddBackward>({&self, &src});
  node->node_name = name;
  node->shape = src.shape();
  node->dim = dim;
  node->broadcast = broadcast;
  if (src.requires_grad()) node->index = SavedTensor(index);
  autograd::set_history(out, node);
}

}  // namespace

namespace detail {

void check_index_range(const char* op, const Tensor& index, int64_t limit, const char* what,
                       const std::string& context) {
  check_index_dtype(op, index);
  Kernels* kern = kernels_for(index);
  if (kern == nullptr || index.numel() == 0) return;
  Tensor flat = index.detach().contiguous();
  const int64_t pos = kern->first_out_of_range(current_stream(index.device()), flat, limit);
  if (pos < 0) return;
  const int64_t value = flat.reshape(Shape{flat.numel()}).narrow(0, pos, 1).item<int64_t>();
  detail::throw_error(detail::str_cat("[", op, "] ", what, " ", value, " at position ",
                                      position_str(index.shape(), pos), " of the ", index.shape(), " ", what,
                                      " tensor is out of range [0, ", limit, ")", context));
}

}  // namespace detail

TopKResult topk(const Tensor& x, int64_t k, int64_t dim_in, bool largest, bool sorted) {
  OpScope scope("topk");
  detail::check_defined("topk", x, "the input");
  TIDAL_CHECK(x.dim() >= 1, "[topk] the input must have at least 1 dim, got a scalar ", x.shape());
  const int dim = normalize_dim(dim_in, x.dim(), "topk");
  TIDAL_CHECK(k >= 0 && k <= x.shape()[dim], "[topk] k = ", k, " is out of range [0, ", x.shape()[dim], "] for dim ",
              dim, " of ", x.shape());
  Shape out_shape = x.shape();
  out_shape[dim] = k;
  TopKResult r{empty(out_shape, x.dtype(), x.device()), empty(out_shape, DType::i64, x.device())};
  if (Kernels* kern = kernels_for(x))
    kern->topk(current_stream(x.device()), r.values, r.indices, x.detach(), dim, k, largest, sorted);
  // Indices are integers: no gradient.
  if (autograd::needs_grad(x)) record_scatter_grad(r.values, x, "TopKBackward", dim, false, r.indices, 0);
  return r;
}

Tensor gather(const Tensor& x, int64_t dim_in, const Tensor& index) {
  OpScope scope("gather");
  const int dim = check_indexed("gather", x, "x", index, dim_in);
  TIDAL_CHECK(index.dim() == x.dim(), "[gather] the index ", index.shape(), " must have the rank of x ", x.shape());
  for (int d = 0; d < x.dim(); ++d)
    TIDAL_CHECK(d == dim || index.shape()[d] <= x.shape()[d], "[gather] the index ", index.shape(),
                " is larger than x ", x.shape(), " in dim ", d);
  check_range("gather", index, x, "x", dim);
  Tensor out = gather_raw(x, dim, index);
  if (autograd::needs_grad(x)) record_scatter_grad(out, x, "GatherBackward", dim, false, index);
  return out;
}

Tensor scatter_add(const Tensor& self, int64_t dim_in, const Tensor& index, const Tensor& src) {
  OpScope scope("scatter_add");
  detail::check_same("scatter_add", self, src);
  const int dim = check_indexed("scatter_add", self, "self", index, dim_in);
  TIDAL_CHECK(index.dim() == self.dim() && src.dim() == self.dim(), "[scatter_add] self ", self.shape(), ", index ",
              index.shape(), " and src ", src.shape(), " must have the same rank");
  for (int d = 0; d < self.dim(); ++d) {
    TIDAL_CHECK(index.shape()[d] <= src.shape()[d], "[scatter_add] the index ", index.shape(), " is larger than src ",
                src.shape(), " in dim ", d);
    TIDAL_CHECK(d == dim || index.shape()[d] <= self.shape()[d], "[scatter_add] the index ", index.shape(),
                " is larger than self ", self.shape(), " in dim ", d);
  }
  check_range("scatter_add", index, self, "self", dim);
  Tensor out = scatter_into_copy(self, dim, index, src);
  if (autograd::needs_grad(self, src)) record_scatter_add_grad(out, self, src, "ScatterAddBackward", dim, false, index);
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim_in, const Tensor& index) {
  OpScope scope("index_select");
  const int dim = check_indexed("index_select", x, "x", index, dim_in);
  TIDAL_CHECK(index.dim() <= 1, "[index_select] the index must be 1-D, got ", index.shape(), " (x ", x.shape(), ")");
  check_range("index_select", index, x, "x", dim);
  Shape out_shape = x.shape();
  out_shape[dim] = index.numel();
  Tensor out = gather_raw(x, dim, broadcast_index(index, out_shape, dim));
  if (autograd::needs_grad(x)) record_scatter_grad(out, x, "IndexSelectBackward", dim, true, index);
  return out;
}

Tensor index_add(const Tensor& self, int64_t dim_in, const Tensor& index, const Tensor& src) {
  OpScope scope("index_add");
  detail::check_same("index_add", self, src);
  const int dim = check_indexed("index_add", self, "self", index, dim_in);
  TIDAL_CHECK(index.dim() <= 1, "[index_add] the index must be 1-D, got ", index.shape(), " (self ", self.shape(), ")");
  Shape want = self.shape();
  want[dim] = index.numel();
  TIDAL_CHECK(src.shape() == want, "[index_add] src ", src.shape(), " must be self ", self.shape(), " with dim ", dim,
              " of the index's length ", index.numel(), ", i.e. ", want);
  check_range("index_add", index, self, "self", dim);
  Tensor out = scatter_into_copy(self, dim, broadcast_index(index, want, dim), src);
  if (autograd::needs_grad(self, src)) record_scatter_add_grad(out, self, src, "IndexAddBackward", dim, true, index);
  return out;
}

Tensor argsort(const Tensor& x, int64_t dim_in, bool descending) {
  OpScope scope("argsort");
  detail::check_defined("argsort", x, "the input");
  if (x.dim() == 0) return zeros(Shape{}, DType::i64, x.device());
  const int dim = normalize_dim(dim_in, x.dim(), "argsort");
  Tensor out = empty(x.shape(), DType::i64, x.device());
  if (Kernels* kern = kernels_for(out)) kern->argsort(current_stream(out.device()), out, x.detach(), dim, descending);
  return out;
}

Tensor bincount(const Tensor& index, int64_t minlength) {
  OpScope scope("bincount");
  check_index_dtype("bincount", index);
  TIDAL_CHECK(index.dim() == 1, "[bincount] the index must be 1-D, got ", index.shape());
  TIDAL_CHECK(minlength >= 0, "[bincount] minlength must be >= 0, got ", minlength);
  Kernels* kern = kernels_for(index);
  if (kern == nullptr) return empty(Shape{minlength}, DType::i64, index.device());  // lengths come from values
  Tensor flat = index.detach().contiguous();
  int64_t length = minlength;
  if (flat.numel() > 0) {
    // Values are non-negative: a negative one is the first "out of range" for an unbounded limit.
    const int64_t neg =
        kern->first_out_of_range(current_stream(index.device()), flat, std::numeric_limits<int64_t>::max());
    TIDAL_CHECK(neg < 0, "[bincount] value ", flat.narrow(0, neg, 1).item<int64_t>(), " at position (", neg,
                ") of the ", index.shape(), " index is negative: bincount counts values >= 0");
    length = std::max(length, kern->index_max(current_stream(index.device()), flat, nullptr) + 1);
  }
  Tensor counts = zeros(Shape{length}, DType::i64, index.device());
  kern->bincount(current_stream(index.device()), counts, flat);
  return counts;
}

}  // namespace tidal
