#include "tidal/tensor.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <ostream>

#include "tidal/autograd/grad_mode.h"
#include "tidal/autograd/node.h"
#include "tidal/base/checked_math.h"
#include "tidal/dtype_dispatch.h"
#include "tidal/memory_scope.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype) {
  impl_ = std::make_shared<TensorImpl>();
  impl_->storage = std::move(storage);
  impl_->shape = shape;
  impl_->strides = strides;
  impl_->offset = offset;
  impl_->dtype = dtype;
}

int64_t Tensor::size(int64_t d) const { return shape()[normalize_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[normalize_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = dim() - 1; d >= 0; --d) {
    if (shape()[d] == 1) continue;
    if (strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

void Tensor::check_data_access(DType want) const {
  TIDAL_CHECK(dtype() == want, "[tensor] data<", dtype_name(want), ">() on a ", dtype(), " tensor ", shape());
  TIDAL_CHECK(!is_meta(), "[tensor] a meta tensor ", shape(), " has no data (it only has a shape)");
  TIDAL_CHECK(storage()->is_materialized(), "[tensor] the bytes of this ", shape(),
              " tensor were released (offloaded or discarded for recompute) and not brought back");
}

void* Tensor::raw_data() const {
  check_data_access(dtype());
  return static_cast<char*>(storage()->data()) + offset() * itemsize();
}

template <typename T>
T Tensor::item() const {
  TIDAL_CHECK(numel() == 1, "[item] needs a tensor with one element, got ", shape());
  check_data_access(dtype());
  return dispatch_all(dtype(), "item", [&](auto tag) {
    using S = typename decltype(tag)::type;
    S v;
    device_kernels(device()).copy_to_host(current_stream(device()), &v,
                                          *this);  // one element: contiguous, no allocation
    return T(acc_t<S>(v));
  });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  Tensor src = *this;
  if (src.dtype() != dtype_v<T>) src = src.to(dtype_v<T>);
  src = src.contiguous();
  src.check_data_access(dtype_v<T>);
  std::vector<T> out(size_t(src.numel()));
  device_kernels(src.device()).copy_to_host(current_stream(src.device()), out.data(), src);
  return out;
}

template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template int32_t Tensor::item<int32_t>() const;
template uint8_t Tensor::item<uint8_t>() const;
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;

std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::string s = detail::str_cat("Tensor(", dtype(), ", ", shape(), ", ", device());
  if (grad_fn())
    s += detail::str_cat(", grad_fn=", grad_fn()->name());
  else if (requires_grad())
    s += ", requires_grad";
  s += ")";
  if (is_meta() || !storage()->is_materialized()) return s;
  std::vector<double> v = to_vector<double>();
  s += "[";
  const size_t shown = std::min<size_t>(v.size(), 8);
  for (size_t i = 0; i < shown; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.6g", i ? ", " : "", v[i]);
    s += buf;
  }
  if (v.size() > shown) s += ", ...";
  return s + "]";
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

// --- autograd

bool Tensor::requires_grad() const { return ref().requires_grad || ref().grad_fn != nullptr; }

Tensor& Tensor::set_requires_grad(bool on) {
  TIDAL_CHECK(is_leaf(), "[tensor] requires_grad can only be set on leaf tensors; use detach() first");
  TIDAL_CHECK(!on || is_floating(dtype()), "[tensor] only floating tensors can require grad, got ", dtype());
  ref().requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return ref().grad ? Tensor(ref().grad) : Tensor(); }

void Tensor::set_grad(const Tensor& g) const {
  if (!g.defined()) {
    ref().grad.reset();
    return;
  }
  // A bf16 tensor may hold an f32 gradient: mixed precision's f32 sum of its bf16 gradients
  // (train/main_grads.h), which the optimizer reads; a backward does not add into it.
  const bool main_grad = dtype() == DType::bf16 && g.dtype() == DType::f32;
  TIDAL_CHECK(g.shape() == shape() && (g.dtype() == dtype() || main_grad), "[tensor] gradient ", g.shape(), " ",
              g.dtype(), " does not match the tensor ", shape(), " ", dtype());
  ref().grad = g.impl();
}

uint64_t Tensor::add_post_accumulate_grad_hook(std::function<void()> hook) const {
  TIDAL_CHECK(is_leaf(), "post-accumulate-grad hooks are for leaves (parameters), not results of ops");
  static std::atomic<uint64_t> next_key{1};
  const uint64_t key = next_key++;
  ref().post_accumulate_grad_hooks.emplace_back(key, std::move(hook));
  return key;
}

void Tensor::remove_post_accumulate_grad_hook(uint64_t key) const {
  auto& hooks = ref().post_accumulate_grad_hooks;
  std::erase_if(hooks, [key](const auto& h) { return h.first == key; });
}

void Tensor::retain_grad() {
  if (is_leaf()) return;
  std::shared_ptr<autograd::Node> fn = grad_fn();
  fn->retained()[ref().output_nr] = impl_;
}

Tensor Tensor::detach() const { return Tensor(storage(), shape(), strides(), offset(), dtype()); }

// --- in-place

namespace {
void check_inplace(const Tensor& t, const char* op) {
  TIDAL_CHECK(!(autograd::grad_enabled() && t.requires_grad()), "[", op, "] in-place change of a ", t.shape(),
              " tensor that requires grad; do it under NoGradGuard or on a detached tensor");
  t.storage()->bump_version();
}
}  // namespace

Tensor& Tensor::zero_() { return fill_(0.0); }

Tensor& Tensor::fill_(double value) {
  check_inplace(*this, "fill_");
  if (Kernels* kern = kernels_for(*this)) kern->fill(current_stream(device()), *this, value);
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src) {
  check_inplace(*this, "copy_");
  TIDAL_CHECK(src.device() == device(), "[copy_] source on ", src.device(), " but destination on ", device(),
              "; use to(Device) or copy_async for transfers");
  broadcast_shapes(shape(), src.shape(), "copy_");
  TIDAL_CHECK(broadcast_shapes(shape(), src.shape(), "copy_") == shape(), "[copy_] source ", src.shape(),
              " does not broadcast to the destination ", shape());
  if (Kernels* kern = kernels_for(*this)) kern->copy(current_stream(device()), *this, src);
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  check_inplace(*this, "add_");
  TIDAL_CHECK(other.device() == device() && other.dtype() == dtype(), "[add_] operands differ: ", shape(), " ", dtype(),
              " on ", device(), " and ", other.shape(), " ", other.dtype(), " on ", other.device());
  TIDAL_CHECK(broadcast_shapes(shape(), other.shape(), "add_") == shape(), "[add_] ", other.shape(),
              " does not broadcast to ", shape());
  if (Kernels* kern = kernels_for(*this)) kern->add_inplace(current_stream(device()), *this, other, alpha);
  return *this;
}

Tensor& Tensor::mul_(double value) {
  check_inplace(*this, "mul_");
  if (Kernels* kern = kernels_for(*this)) kern->unary(current_stream(device()), Unary::mul_scalar, *this, *this, value);
  return *this;
}

// --- creation

namespace {

// The bytes of a new tensor of `shape`, checked here, once per allocation, so a shape from a file (a
// config.json's 2^56-wide layer) is a clear error instead of a wrapped, too-small buffer. numel() stays
// an unchecked product for the hot paths, and the message is only built on failure.
int64_t allocation_bytes(const Shape& shape, DType dtype, const char* op) {
  const int64_t bytes = product_bytes_or_neg(std::span<const int64_t>(shape.begin(), shape.end()), dtype_size(dtype));
  if (bytes >= 0) [[likely]]
    return bytes;
  for (int64_t d : shape) TIDAL_CHECK(d >= 0, "[", op, "] negative dimension in shape ", shape);
  TIDAL_CHECK(false, "[", op, "] a ", dtype, " tensor of shape ", shape,
              " would need more than 2^63 bytes (its size overflows): a size in the model's config or the flags is "
              "far too large");
  return -1;
}

}  // namespace

Tensor empty(const Shape& shape, DType dtype, Device device) {
  auto storage = Storage::make(allocation_bytes(shape, dtype, "empty"), device);
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }

Tensor empty_host(const Shape& shape, DType dtype, Device device) {
  auto storage = Storage::make_host(allocation_bytes(shape, dtype, "empty_host"), device);
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  if (Kernels* kern = kernels_for(t)) kern->fill(current_stream(t.device()), t, value);
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor scalar_tensor(double value, DType dtype, Device device) { return full(Shape{}, value, dtype, device); }

Tensor arange(int64_t start, int64_t end, int64_t step, DType dtype, Device device) {
  TIDAL_CHECK(step != 0, "[arange] step must not be 0");
  const int64_t n = std::max<int64_t>(0, (end - start + step - (step > 0 ? 1 : -1)) / step);
  Tensor t = empty(Shape{n}, dtype, device);
  if (Kernels* kern = kernels_for(t)) {
    dispatch_all(dtype, "arange", [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<T> host(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) host[size_t(i)] = T(acc_t<T>(start + i * step));
      kern->copy_from_host(current_stream(t.device()), t, host.data());
    });
  }
  return t;
}

Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype, Device device) {
  TIDAL_CHECK(int64_t(values.size()) == shape.numel(), "[from_vector] ", values.size(), " values for shape ", shape,
              " (", shape.numel(), " elements)");
  Tensor t = empty(shape, dtype, device);
  if (Kernels* kern = kernels_for(t)) {
    dispatch_all(dtype, "from_vector", [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<T> host(values.size());
      for (size_t i = 0; i < values.size(); ++i) host[i] = T(acc_t<T>(values[i]));
      kern->copy_from_host(current_stream(t.device()), t, host.data());
    });
  }
  return t;
}

Tensor from_vector_i64(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  TIDAL_CHECK(int64_t(values.size()) == shape.numel(), "[from_vector] ", values.size(), " values for shape ", shape,
              " (", shape.numel(), " elements)");
  Tensor t = empty(shape, DType::i64, device);
  if (Kernels* kern = kernels_for(t)) kern->copy_from_host(current_stream(t.device()), t, values.data());
  return t;
}

}  // namespace tidal
