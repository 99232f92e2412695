// Copies: contiguous, clone, dtype and device conversion (members of Tensor).
#include "tidal/autograd/grad_mode.h"
#include "tidal/ops/common.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::TensorList;

struct CloneBackward : Node {
  const char* name() const override { return "CloneBackward"; }
  TensorList apply(TensorList&& g) override { return {g[0]}; }
};

struct ConvertBackward : Node {
  DType from = DType::f32;
  const char* name() const override { return "ConvertBackward"; }
  TensorList apply(TensorList&& g) override { return {g[0].to(from)}; }
};

}  // namespace

Tensor Tensor::clone() const {
  OpScope scope("clone");
  Tensor out = empty(shape(), dtype(), device());
  if (Kernels* kern = kernels_for(out)) kern->copy(current_stream(out.device()), out, *this);
  if (autograd::needs_grad(*this)) {
    auto node = autograd::make_node<CloneBackward>({this});
    autograd::set_history(out, node);
  }
  return out;
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::to(DType target) const {
  if (target == dtype()) return *this;
  OpScope scope("to");
  Tensor out = empty(shape(), target, device());
  if (Kernels* kern = kernels_for(out)) kern->copy(current_stream(out.device()), out, *this);
  if (autograd::needs_grad(*this) && is_floating(target)) {
    auto node = autograd::make_node<ConvertBackward>({this});
    node->from = dtype();
    autograd::set_history(out, node);
  }
  return out;
}

Tensor Tensor::to(Device target) const {
  if (target == device()) return *this;
  TIDAL_CHECK(!is_meta(), "[to] a meta tensor ", shape(), " has no data to copy to ", target);
  TIDAL_CHECK(!autograd::needs_grad(*this), "[to] copies between devices are not differentiable; detach() first");
  if (target.is_meta()) return empty(shape(), dtype(), target);  // keeps the shape and the accounting only
  OpScope scope("to");
  if (!device().is_cpu() && !target.is_cpu()) return to(Device::cpu()).to(target);  // cuda:A -> cuda:B: via the host
  const Tensor src = contiguous();  // on its own device (its copy kernel)
  Tensor out = empty(shape(), dtype(), target);
  if (target.is_cpu())  // device -> host: the source's backend copies into the host tensor's bytes
    device_kernels(src.device()).copy_to_host(current_stream(src.device()), out.raw_data(), src);
  else  // host -> device
    device_kernels(target).copy_from_host(current_stream(target), out, src.raw_data());
  return out;
}

}  // namespace tidal
