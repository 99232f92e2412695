#include "tidal/ops/view.h"

#include <algorithm>
#include <numeric>

#include "tidal/autograd/grad_mode.h"
#include "tidal/ops/common.h"
#include "tidal/ops/reduce.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::TensorList;

Tensor make_view(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  return Tensor(t.storage(), shape, strides, offset, t.dtype());
}

// Backward of any reshape-like view: reshape the gradient back.
struct ReshapeBackward : Node {
  Shape in_shape;
  const char* name() const override { return "ReshapeBackward"; }
  TensorList apply(TensorList&& g) override { return {reshape(g[0], in_shape)}; }
};

struct TransposeBackward : Node {
  int64_t d0 = 0, d1 = 0;
  const char* name() const override { return "TransposeBackward"; }
  TensorList apply(TensorList&& g) override { return {transpose(g[0], d0, d1)}; }
};

struct PermuteBackward : Node {
  std::vector<int64_t> inverse;
  const char* name() const override { return "PermuteBackward"; }
  TensorList apply(TensorList&& g) override { return {permute(g[0], inverse)}; }
};

// Narrow/select: the gradient of the input is zero outside the piece.
struct NarrowBackward : Node {
  Shape in_shape;
  int64_t dim = 0, start = 0, length = 0;
  bool squeezed = false;  // select: the gradient lacks the dim
  const char* name() const override { return squeezed ? "SelectBackward" : "NarrowBackward"; }
  TensorList apply(TensorList&& g) override {
    Tensor gi = zeros(in_shape, g[0].dtype(), g[0].device());
    Tensor piece = gi.narrow(dim, start, length);
    piece.copy_(squeezed ? g[0].unsqueeze(dim) : g[0]);
    return {gi};
  }
};

struct ExpandBackward : Node {
  Shape in_shape;
  const char* name() const override { return "ExpandBackward"; }
  TensorList apply(TensorList&& g) override { return {sum_to(g[0], in_shape)}; }
};

// One node for all pieces of a split: the input gradient is assembled once (zeros where a piece
// got no gradient).
struct SplitBackward : Node {
  Shape in_shape;
  DType dtype = DType::f32;
  Device device;
  int64_t dim = 0;
  std::vector<int64_t> sizes;
  const char* name() const override { return "SplitBackward"; }
  TensorList apply(TensorList&& g) override {
    Tensor gi = empty(in_shape, dtype, device);
    int64_t start = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      Tensor piece = gi.narrow(dim, start, sizes[i]);
      if (g[i].defined())
        piece.copy_(g[i]);
      else
        piece.zero_();
      start += sizes[i];
    }
    return {gi};
  }
};

struct CatBackward : Node {
  int64_t dim = 0;
  std::vector<int64_t> sizes;
  const char* name() const override { return "CatBackward"; }
  TensorList apply(TensorList&& g) override {
    TensorList out;
    int64_t start = 0;
    for (int64_t s : sizes) {
      out.push_back(g[0].narrow(dim, start, s));
      start += s;
    }
    return out;
  }
};

template <typename N>
Tensor with_node(const Tensor& in, Tensor out, std::shared_ptr<N> node) {
  node->set_next_edges(autograd::collect_next_edges({&in}));
  autograd::set_history(out, node);
  return out;
}

// Strides that view `t` with `shape` without a copy, or an empty Shape with size() != shape.size()
// when impossible (PyTorch's computeStride).
bool view_strides(const Tensor& t, const Shape& shape, Shape& out) {
  out.resize(shape.size());
  if (t.numel() == 0 || t.dim() == 0) {
    out = contiguous_strides(shape);
    return true;
  }
  const Shape& old_shape = t.shape();
  const Shape& old_strides = t.strides();
  int64_t view_d = shape.size() - 1;
  int64_t chunk_base_stride = old_strides.size() ? old_strides.back() : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = old_shape.size() - 1; d >= 0; --d) {
    tensor_numel *= old_shape[int(d)];
    if (d == 0 || (old_shape[int(d - 1)] != 1 && old_strides[int(d - 1)] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[int(view_d)] == 1)) {
        out[int(view_d)] = view_numel * chunk_base_stride;
        view_numel *= shape[int(view_d)];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = old_strides[int(d - 1)];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

Shape infer_shape(const Tensor& t, Shape shape, const char* op) {
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TIDAL_CHECK(infer < 0, "[", op, "] only one dim can be -1, got ", shape);
      infer = i;
    } else {
      TIDAL_CHECK(shape[i] >= 0, "[", op, "] invalid dim ", shape[i], " in ", shape);
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TIDAL_CHECK(known > 0 && t.numel() % known == 0, "[", op, "] cannot infer the -1 dim of ", shape, " for ",
                t.shape(), " (", t.numel(), " elements)");
    shape[infer] = t.numel() / known;
  }
  TIDAL_CHECK(shape.numel() == t.numel(), "[", op, "] shape ", shape, " (", shape.numel(),
              " elements) is invalid for a tensor ", t.shape(), " of ", t.numel(), " elements");
  return shape;
}

Tensor reshape_view(const Tensor& t, const Shape& shape, const Shape& strides) {
  Tensor out = make_view(t, shape, strides, t.offset());
  if (autograd::needs_grad(t)) {
    auto node = std::make_shared<ReshapeBackward>();
    node->in_shape = t.shape();
    return with_node(t, out, node);
  }
  return out;
}

}  // namespace

Tensor view(const Tensor& t, Shape shape) {
  detail::check_defined("view", t, "the input");
  shape = infer_shape(t, shape, "view");
  Shape strides;
  TIDAL_CHECK(view_strides(t, shape, strides), "[view] a ", t.shape(), " tensor with strides ", t.strides(),
              " cannot be viewed as ", shape, " without a copy; use reshape()");
  return reshape_view(t, shape, strides);
}

Tensor reshape(const Tensor& t, Shape shape) {
  detail::check_defined("reshape", t, "the input");
  shape = infer_shape(t, shape, "reshape");
  Shape strides;
  if (view_strides(t, shape, strides)) return reshape_view(t, shape, strides);
  return reshape_view(t.contiguous(), shape, contiguous_strides(shape));
}

Tensor transpose(const Tensor& t, int64_t d0, int64_t d1) {
  detail::check_defined("transpose", t, "the input");
  const int a = normalize_dim(d0, t.dim(), "transpose"), b = normalize_dim(d1, t.dim(), "transpose");
  Shape shape = t.shape(), strides = t.strides();
  if (t.dim() == 0) return t;
  std::swap(shape[a], shape[b]);
  std::swap(strides[a], strides[b]);
  Tensor out = make_view(t, shape, strides, t.offset());
  if (autograd::needs_grad(t)) {
    auto node = std::make_shared<TransposeBackward>();
    node->d0 = a;
    node->d1 = b;
    return with_node(t, out, node);
  }
  return out;
}

Tensor permute(const Tensor& t, const std::vector<int64_t>& dims) {
  detail::check_defined("permute", t, "the input");
  TIDAL_CHECK(int(dims.size()) == t.dim(), "[permute] got ", dims.size(), " dims for a ", t.shape(), " tensor");
  std::vector<int64_t> norm(dims.size()), inverse(dims.size(), -1);
  Shape shape, strides;
  for (size_t i = 0; i < dims.size(); ++i) {
    norm[i] = normalize_dim(dims[i], t.dim(), "permute");
    TIDAL_CHECK(inverse[size_t(norm[i])] < 0, "[permute] dim ", norm[i], " appears twice in the permutation");
    inverse[size_t(norm[i])] = int64_t(i);
    shape.push_back(t.shape()[int(norm[i])]);
    strides.push_back(t.strides()[int(norm[i])]);
  }
  Tensor out = make_view(t, shape, strides, t.offset());
  if (autograd::needs_grad(t)) {
    auto node = std::make_shared<PermuteBackward>();
    node->inverse = inverse;
    return with_node(t, out, node);
  }
  return out;
}

Tensor narrow(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  detail::check_defined("narrow", t, "the input");
  const int d = normalize_dim(dim, t.dim(), "narrow");
  const int64_t size = t.shape()[d];
  if (start < 0) start += size;
  TIDAL_CHECK(start >= 0 && length >= 0 && start + length <= size, "[narrow] range [", start, ", ", start + length,
              ") is out of bounds for dim ", d, " of ", t.shape());
  Shape shape = t.shape();
  shape[d] = length;
  Tensor out = make_view(t, shape, t.strides(), t.offset() + start * t.strides()[d]);
  if (autograd::needs_grad(t)) {
    auto node = std::make_shared<NarrowBackward>();
    node->in_shape = t.shape();
    node->dim = d;
    node->start = start;
    node->length = length;
    return with_node(t, out, node);
  }
  return out;
}

Tensor select(const Tensor& t, int64_t dim, int64_t index) {
  detail::check_defined("select", t, "the input");
  const int d = normalize_dim(dim, t.dim(), "select");
  const int64_t size = t.shape()[d];
  TIDAL_CHECK(index >= -size && index < size, "[select] index ", index, " is out of range for dim ", d, " of ",
              t.shape());
  if (index < 0) index += size;
  Shape shape = t.shape(), strides = t.strides();
  shape.erase(d);
  strides.erase(d);
  Tensor out = make_view(t, shape, strides, t.offset() + index * t.strides()[d]);
  if (autograd::needs_grad(t)) {
    auto node = std::make_shared<NarrowBackward>();
    node->in_shape = t.shape();
    node->dim = d;
    node->start = index;
    node->length = 1;
    node->squeezed = true;
    return with_node(t, out, node);
  }
  return out;
}

Tensor expand(const Tensor& t, const Shape& shape) {
  detail::check_defined("expand", t, "the input");
  TIDAL_CHECK(shape.size() >= t.dim(), "[expand] cannot expand ", t.shape(), " to fewer dims ", shape);
  Shape out_shape, strides;
  const int off = shape.size() - t.dim();
  for (int i = 0; i < shape.size(); ++i) {
    const int ti = i - off;
    const int64_t want = shape[i];
    if (ti < 0) {
      TIDAL_CHECK(want >= 0, "[expand] -1 is not allowed for the new leading dim ", i, " in ", shape);
      out_shape.push_back(want);
      strides.push_back(0);
      continue;
    }
    const int64_t have = t.shape()[ti];
    const int64_t size = want == -1 ? have : want;
    TIDAL_CHECK(have == size || have == 1, "[expand] cannot expand ", t.shape(), " to ", shape, " (dim ", i, ": ", have,
                " -> ", size, ")");
    out_shape.push_back(size);
    strides.push_back(have == size ? t.strides()[ti] : 0);
  }
  Tensor out = make_view(t, out_shape, strides, t.offset());
  if (autograd::needs_grad(t)) {
    auto node = std::make_shared<ExpandBackward>();
    node->in_shape = t.shape();
    return with_node(t, out, node);
  }
  return out;
}

Tensor unsqueeze(const Tensor& t, int64_t dim) {
  detail::check_defined("unsqueeze", t, "the input");
  const int d = normalize_dim(dim, t.dim() + 1, "unsqueeze");
  Shape shape = t.shape(), strides = t.strides();
  const int64_t st = d < t.dim() ? t.strides()[d] * t.shape()[d] : 1;
  shape.insert(d, 1);
  strides.insert(d, st);
  return reshape_view(t, shape, strides);
}

Tensor squeeze(const Tensor& t, int64_t dim) {
  detail::check_defined("squeeze", t, "the input");
  const int d = normalize_dim(dim, t.dim(), "squeeze");
  if (t.shape()[d] != 1) return t;
  Shape shape = t.shape(), strides = t.strides();
  shape.erase(d);
  strides.erase(d);
  return reshape_view(t, shape, strides);
}

Tensor flatten(const Tensor& t, int64_t start, int64_t end) {
  detail::check_defined("flatten", t, "the input");
  if (t.dim() == 0) return reshape(t, Shape{1});
  const int s = normalize_dim(start, t.dim(), "flatten"), e = normalize_dim(end, t.dim(), "flatten");
  TIDAL_CHECK(s <= e, "[flatten] start dim ", s, " is after end dim ", e);
  Shape shape;
  for (int i = 0; i < s; ++i) shape.push_back(t.shape()[i]);
  int64_t n = 1;
  for (int i = s; i <= e; ++i) n *= t.shape()[i];
  shape.push_back(n);
  for (int i = e + 1; i < t.dim(); ++i) shape.push_back(t.shape()[i]);
  return reshape(t, shape);
}

std::vector<Tensor> split(const Tensor& t, const std::vector<int64_t>& sizes, int64_t dim) {
  detail::check_defined("split", t, "the input");
  const int d = normalize_dim(dim, t.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    TIDAL_CHECK(s >= 0, "[split] negative piece size ", s);
    total += s;
  }
  TIDAL_CHECK(total == t.shape()[d], "[split] piece sizes add up to ", total, " but dim ", d, " of ", t.shape(), " is ",
              t.shape()[d]);
  std::vector<Tensor> out;
  std::shared_ptr<SplitBackward> node;
  if (autograd::needs_grad(t)) {
    node = std::make_shared<SplitBackward>();
    node->in_shape = t.shape();
    node->dtype = t.dtype();
    node->device = t.device();
    node->dim = d;
    node->sizes = sizes;
    node->set_next_edges(autograd::collect_next_edges({&t}));
  }
  int64_t start = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape shape = t.shape();
    shape[d] = sizes[i];
    Tensor piece = make_view(t, shape, t.strides(), t.offset() + start * t.strides()[d]);
    if (node) autograd::set_history(piece, node, uint32_t(i));
    out.push_back(piece);
    start += sizes[i];
  }
  return out;
}

std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  detail::check_defined("chunk", t, "the input");
  const int d = normalize_dim(dim, t.dim(), "chunk");
  TIDAL_CHECK(chunks > 0 && t.shape()[d] % chunks == 0, "[chunk] dim ", d, " of ", t.shape(), " does not split into ",
              chunks, " equal pieces");
  return split(t, std::vector<int64_t>(size_t(chunks), t.shape()[d] / chunks), d);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TIDAL_CHECK(!tensors.empty(), "[cat] needs at least one tensor");
  const Tensor& first = tensors[0];
  detail::check_defined("cat", first, "tensor 0");
  const int d = normalize_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  int64_t total = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_same("cat", first, t);
    TIDAL_CHECK(t.dim() == first.dim(), "[cat] tensor ", i, " ", t.shape(), " has a different number of dims than ",
                first.shape());
    for (int k = 0; k < t.dim(); ++k)
      TIDAL_CHECK(k == d || t.shape()[k] == first.shape()[k], "[cat] tensor ", i, " ", t.shape(), " differs from ",
                  first.shape(), " outside the cat dim ", d);
    sizes.push_back(t.shape()[d]);
    total += t.shape()[d];
  }
  shape[d] = total;
  Tensor out = empty(shape, first.dtype(), first.device());
  if (Kernels* kern = kernels_for(out)) {
    int64_t start = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      kern->copy(current_stream(out.device()), out.detach().narrow(d, start, sizes[i]), tensors[i]);
      start += sizes[i];
    }
  }
  bool any = false;
  for (const Tensor& t : tensors) any = any || autograd::needs_grad(t);
  if (any) {
    auto node = std::make_shared<CatBackward>();
    node->dim = d;
    node->sizes = sizes;
    node->set_next_edges(autograd::collect_next_edges(tensors));
    autograd::set_history(out, node);
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TIDAL_CHECK(!tensors.empty(), "[stack] needs at least one tensor");
  const int d = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (const Tensor& t : tensors) {
    detail::check_defined("stack", t, "an input");
    TIDAL_CHECK(t.shape() == tensors[0].shape(), "[stack] all tensors must have one shape: ", tensors[0].shape(),
                " vs ", t.shape());
    parts.push_back(unsqueeze(t, d));
  }
  return cat(parts, d);
}

Tensor empty_like_layout(const Tensor& t, DType dtype) {
  const int nd = t.dim();
  if (nd <= 1) return empty(t.shape(), dtype, t.device());
  std::vector<int64_t> order(static_cast<size_t>(nd));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end() - 1, [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  Shape shape;
  for (int64_t d : order) shape.push_back(t.size(d));
  std::vector<int64_t> inverse(static_cast<size_t>(nd));
  for (int i = 0; i < nd; ++i) inverse[size_t(order[size_t(i)])] = i;
  return empty(shape, dtype, t.device()).detach().permute(inverse);
}

// --- Tensor members

Tensor Tensor::view(const Shape& s) const { return tidal::view(*this, s); }
Tensor Tensor::reshape(const Shape& s) const { return tidal::reshape(*this, s); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return tidal::transpose(*this, d0, d1); }
Tensor Tensor::permute(const std::vector<int64_t>& dims) const { return tidal::permute(*this, dims); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return tidal::narrow(*this, dim, start, length);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return tidal::select(*this, dim, index); }
Tensor Tensor::expand(const Shape& s) const { return tidal::expand(*this, s); }
Tensor Tensor::unsqueeze(int64_t dim) const { return tidal::unsqueeze(*this, dim); }
Tensor Tensor::squeeze(int64_t dim) const { return tidal::squeeze(*this, dim); }
Tensor Tensor::flatten(int64_t start, int64_t end) const { return tidal::flatten(*this, start, end); }

}  // namespace tidal
