#pragma once
// Tensor: a cheap handle to a shared TensorImpl = Storage + shape + strides + offset + dtype (the
// device is the storage's). Views share the storage. Autograd state (requires_grad, grad, grad_fn)
// lives in the impl; see tidal/autograd/.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/dtype.h"
#include "tidal/shape.h"
#include "tidal/storage.h"

namespace tidal {

namespace autograd {
class Node;
}

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;
  int64_t offset = 0;  // in elements
  DType dtype = DType::f32;
  // autograd
  bool requires_grad = false;  // leaves only; non-leaves require grad iff grad_fn is set
  std::shared_ptr<autograd::Node> grad_fn;
  uint32_t output_nr = 0;
  std::shared_ptr<TensorImpl> grad;
  std::weak_ptr<autograd::Node> grad_accumulator;
  bool retains_grad = false;
  // Leaves: called in order after a backward accumulated into `grad` (PyTorch's post-accumulate-grad
  // hooks), each with the key that removes it.
  std::vector<std::pair<uint64_t, std::function<void()>>> post_accumulate_grad_hooks;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}
  // A view of `storage` (no copy).
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }

  // --- metadata
  const Shape& shape() const { return ref().shape; }
  const Shape& strides() const { return ref().strides; }
  int dim() const { return shape().size(); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t offset() const { return ref().offset; }
  int64_t numel() const { return shape().numel(); }
  DType dtype() const { return ref().dtype; }
  int64_t itemsize() const { return dtype_size(dtype()); }
  int64_t nbytes() const { return numel() * itemsize(); }
  Device device() const { return ref().storage->device(); }
  bool is_meta() const { return device().is_meta(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return ref().storage; }
  bool is_alias_of(const Tensor& other) const { return storage() == other.storage(); }
  std::string str() const;  // "Tensor(f32, (2, 3), cpu)[values...]"

  // --- data (cpu only; throws on meta or released storage, or a dtype mismatch)
  template <typename T>
  T* data() const {
    check_data_access(dtype_v<T>);
    return static_cast<T*>(storage()->data()) + offset();
  }
  void* raw_data() const;  // first element, any dtype
  template <typename T>
  T item() const;  // single-element tensor to a C++ value
  template <typename T>
  std::vector<T> to_vector() const;  // any layout, row-major order

  // --- autograd
  bool requires_grad() const;
  Tensor& set_requires_grad(bool on);  // leaves only
  bool is_leaf() const { return ref().grad_fn == nullptr; }
  const std::shared_ptr<autograd::Node>& grad_fn() const { return ref().grad_fn; }
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  void zero_grad() const { ref().grad.reset(); }
  void retain_grad();  // keep the gradient of a non-leaf after backward
  // Leaves: `hook` runs each time a backward has accumulated this tensor's gradient (once per
  // backward: the engine sums every contribution first), after the hooks added before it. --bf16
  // moves the gradient into its f32 sum from one (train/main_grads.h), data-parallel training starts
  // a bucket's reduction from the next (--overlap-grad-reduce). Returns the key that removes it.
  uint64_t add_post_accumulate_grad_hook(std::function<void()> hook) const;
  void remove_post_accumulate_grad_hook(uint64_t key) const;
  // Backpropagates from this tensor. Without `grad`, the tensor must hold one element.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;  // same storage, no history

  // --- views (share storage; differentiable)
  Tensor view(const Shape& shape) const;     // needs compatible strides
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;  // drops dim
  Tensor expand(const Shape& shape) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor mT() const { return transpose(-2, -1); }

  // --- copies
  Tensor contiguous() const;  // itself when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype) const;    // differentiable between floating types
  Tensor to(Device device) const;  // copy to another device (cpu <-> meta keeps shapes only)

  // --- in-place (not differentiable: tensors that need grad under grad mode are rejected)
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // broadcasts src; converts dtype
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(double value);

 private:
  TensorImpl& ref() const {
    TIDAL_CHECK(impl_ != nullptr, "[tensor] use of an undefined tensor");
    return *impl_;
  }
  void check_data_access(DType want) const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// --- creation
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor empty_like(const Tensor& t);
// Host-pool tensor (offload target) of `device`'s host side, accounted by host_allocator(device) as
// host_offload (a meta tensor for the meta device).
Tensor empty_host(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor scalar_tensor(double value, DType dtype = DType::f32, Device device = Device::cpu());
// [start, end) step `step`.
Tensor arange(int64_t start, int64_t end, int64_t step = 1, DType dtype = DType::i64, Device device = Device::cpu());
// Copies `values` (converted to `dtype`) into a new tensor of `shape`.
Tensor from_vector(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32,
                   Device device = Device::cpu());
Tensor from_vector_i64(const std::vector<int64_t>& values, const Shape& shape, Device device = Device::cpu());

}  // namespace tidal
