#include "tidal/ops/reduce.h"

#include <algorithm>

#include "tidal/ops/common.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/view.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

std::vector<int> normalize_dims(const Tensor& t, const std::vector<int64_t>& dims, const char* op) {
  std::vector<int> out;
  if (dims.empty()) {
    for (int d = 0; d < t.dim(); ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(normalize_dim(d, t.dim(), op));
  std::sort(out.begin(), out.end());
  TIDAL_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(), "[", op, "] a dim appears twice");
  return out;
}

Shape keepdim_shape(const Shape& in, const std::vector<int>& dims) {
  Shape s = in;
  for (int d : dims) s[d] = 1;
  return s;
}

Shape squeezed_shape(const Shape& in, const std::vector<int>& dims) {
  Shape s;
  for (int d = 0; d < in.size(); ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d)) s.push_back(in[d]);
  return s;
}

// Lays `t` out as a contiguous (outer, n, inner) block with the reduced dims in the middle.
struct Layout {
  Tensor x;
  int64_t outer = 1, n = 1, inner = 1;
};

Layout reduction_layout(const Tensor& t, const std::vector<int>& dims) {
  Layout l;
  const bool adjacent = dims.empty() || dims.back() - dims.front() + 1 == int(dims.size());
  if (adjacent) {
    l.x = t.contiguous();
    if (dims.empty()) return l;
    for (int d = 0; d < t.dim(); ++d) {
      if (d < dims.front())
        l.outer *= t.shape()[d];
      else if (d <= dims.back())
        l.n *= t.shape()[d];
      else
        l.inner *= t.shape()[d];
    }
    return l;
  }
  std::vector<int64_t> perm;
  for (int d = 0; d < t.dim(); ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d)) {
      perm.push_back(d);
      l.outer *= t.shape()[d];
    }
  for (int d : dims) {
    perm.push_back(d);
    l.n *= t.shape()[d];
  }
  l.x = t.detach().permute(perm).contiguous();
  return l;
}

struct SumBackward : Node {
  Shape in_shape, keep_shape;
  double scale = 1.0;
  const char* name() const override { return scale == 1.0 ? "SumBackward" : "MeanBackward"; }
  TensorList apply(TensorList&& g) override {
    Tensor gk = g[0].reshape(keep_shape);
    if (scale != 1.0) gk = mul(gk, scale);
    return {gk.expand(in_shape)};
  }
};

Tensor reduce_sum(const Tensor& t, const std::vector<int64_t>& dims_in, bool keepdim, bool is_mean) {
  const char* op = is_mean ? "mean" : "sum";
  OpScope scope(op);
  detail::check_floating(op, t);
  const std::vector<int> dims = normalize_dims(t, dims_in, op);
  const Shape keep = keepdim_shape(t.shape(), dims);
  int64_t count = 1;
  for (int d : dims) count *= t.shape()[d];
  const double scale = is_mean ? 1.0 / double(std::max<int64_t>(count, 1)) : 1.0;
  Tensor out = empty(keepdim ? keep : squeezed_shape(t.shape(), dims), t.dtype(), t.device());
  if (Kernels* kern = kernels_for(out)) {
    if (count == 0) {
      out.detach().fill_(is_mean ? 0.0 / 0.0 : 0.0);
    } else {
      Layout l = reduction_layout(t.detach(), dims);
      kern->sum(current_stream(out.device()), out, l.x, l.outer, l.n, l.inner, scale);
    }
  }
  if (autograd::needs_grad(t)) {
    auto node = autograd::make_node<SumBackward>({&t});
    node->in_shape = t.shape();
    node->keep_shape = keep;
    node->scale = scale;
    autograd::set_history(out, node);
  }
  return out;
}

struct MaxBackward : Node {
  Shape in_shape;
  int dim = 0;
  SavedTensor indices;
  const char* name() const override { return "MaxBackward"; }
  TensorList apply(TensorList&& g) override {
    Tensor gi = zeros(in_shape, g[0].dtype(), g[0].device());
    // On meta too: the copies a real run makes.
    const Tensor gc = g[0].contiguous(), ic = indices.unpack(name()).contiguous();
    if (Kernels* kern = kernels_for(gi)) {
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < dim; ++d) outer *= in_shape[d];
      for (int d = dim + 1; d < in_shape.size(); ++d) inner *= in_shape[d];
      kern->max_backward(current_stream(gi.device()), gi, gc, ic, outer, in_shape[dim], inner);
    }
    return {gi};
  }
  void release_saved() override { indices.reset(); }
};

}  // namespace

Tensor sum(const Tensor& t) { return reduce_sum(t, {}, false, false); }
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_sum(t, dims.empty() ? std::vector<int64_t>{} : dims, keepdim, false);
}
Tensor mean(const Tensor& t) { return reduce_sum(t, {}, false, true); }
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce_sum(t, dims, keepdim, true);
}

MaxResult max(const Tensor& t, int64_t dim, bool keepdim) {
  OpScope scope("max");
  detail::check_floating("max", t);
  const int d = normalize_dim(dim, t.dim(), "max");
  TIDAL_CHECK(t.dim() == 0 || t.shape()[d] > 0, "[max] cannot take the max over an empty dim ", d, " of ", t.shape());
  const std::vector<int> dims = t.dim() == 0 ? std::vector<int>{} : std::vector<int>{d};
  const Shape keep = keepdim_shape(t.shape(), dims);
  const Shape out_shape = keepdim ? keep : squeezed_shape(t.shape(), dims);
  MaxResult r{empty(out_shape, t.dtype(), t.device()), empty(out_shape, DType::i64, t.device())};
  if (Kernels* kern = kernels_for(r.values)) {
    Layout l = reduction_layout(t.detach(), dims);
    kern->max(current_stream(r.values.device()), r.values, r.indices, l.x, l.outer, l.n, l.inner);
  }
  if (autograd::needs_grad(t)) {
    auto node = autograd::make_node<MaxBackward>({&t});
    node->in_shape = t.shape();
    node->dim = t.dim() == 0 ? 0 : d;
    node->indices = SavedTensor(r.indices);
    autograd::set_history(r.values, node, 0);  // indices are integers: no gradient
  }
  return r;
}

Tensor max(const Tensor& t) {
  detail::check_floating("max", t);
  TIDAL_CHECK(t.numel() > 0, "[max] cannot take the max of an empty tensor ", t.shape());
  return max(t.reshape(Shape{t.numel()}), 0, false).values;
}

Tensor sum_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  TIDAL_CHECK(shape.size() <= t.dim(), "[sum_to] cannot sum ", t.shape(), " down to ", shape);
  const int lead = t.dim() - shape.size();
  std::vector<int64_t> dims;
  for (int d = 0; d < t.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
      continue;
    }
    const int64_t want = shape[d - lead];
    TIDAL_CHECK(want == t.shape()[d] || want == 1, "[sum_to] cannot sum ", t.shape(), " down to ", shape);
    if (want == 1 && t.shape()[d] != 1) dims.push_back(d);
  }
  if (dims.empty()) return t.reshape(shape);
  return sum(t, dims, true).reshape(shape);
}

}  // namespace tidal
