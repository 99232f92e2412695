#include "tidal/ops/activation.h"

#include "tidal/ops/common.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::SavedTensor;
using autograd::TensorList;

// The gradient of an elementwise op has the input's shape; the kernels read any strides.
Tensor grad_like(const Tensor& x) { return empty(x.shape(), x.dtype(), x.device()); }

// The kernels to run, if any: none on meta, and none for empty tensors (the strided loops need numel > 0).
Kernels* runs(const Tensor& t) { return t.numel() > 0 ? kernels_for(t) : nullptr; }

struct GeluBackward : Node {
  SavedTensor x;
  bool tanh_approx = true;
  const char* name() const override { return "GeluBackward"; }
  TensorList apply(TensorList&& grads) override {
    Tensor xv = x.unpack(name());
    Tensor dx = grad_like(xv);
    if (Kernels* kern = runs(dx)) kern->gelu_backward(current_stream(dx.device()), dx, grads[0], xv, tanh_approx);
    return {dx};
  }
  void release_saved() override { x.reset(); }
};

struct SiluBackward : Node {
  SavedTensor x;
  const char* name() const override { return "SiluBackward"; }
  TensorList apply(TensorList&& grads) override {
    Tensor xv = x.unpack(name());
    Tensor dx = grad_like(xv);
    if (Kernels* kern = runs(dx)) kern->silu_backward(current_stream(dx.device()), dx, grads[0], xv);
    return {dx};
  }
  void release_saved() override { x.reset(); }
};

struct GluBackward : Node {
  SavedTensor gate, up;
  GluActivation act = GluActivation::silu;
  const char* name() const override { return act == GluActivation::silu ? "SwigluBackward" : "GegluBackward"; }
  TensorList apply(TensorList&& grads) override {
    Tensor gv = gate.unpack(name());
    Tensor uv = needs_input_grad(0) ? up.unpack(name()) : Tensor();
    Tensor dgate = needs_input_grad(0) ? grad_like(gv) : Tensor();
    Tensor dup = needs_input_grad(1) ? grad_like(gv) : Tensor();
    if (Kernels* kern = runs(gv)) kern->glu_backward(current_stream(gv.device()), dgate, dup, grads[0], gv, uv, act);
    return {dgate, dup};
  }
  void release_saved() override { autograd::reset_all(gate, up); }
};

// act(gate) * up in one kernel; saves gate and (for dgate) up, no act(gate) intermediate.
Tensor gated(const Tensor& gate, const Tensor& up, GluActivation act) {
  const char* op = glu_name(act);
  OpScope scope(op);
  detail::check_floating(op, gate);
  detail::check_same(op, gate, up);
  TIDAL_CHECK(gate.shape() == up.shape(), "[", op, "] gate and up must have one shape, got gate ", gate.shape(),
              " and up ", up.shape());
  Tensor out = empty(gate.shape(), gate.dtype(), gate.device());
  if (Kernels* kern = runs(out)) kern->glu_forward(current_stream(out.device()), out, gate, up, act);
  if (autograd::needs_grad(gate, up)) {
    auto node = autograd::make_node<GluBackward>({&gate, &up});
    node->act = act;
    node->gate = SavedTensor(gate);                        // both gradients read gate
    if (gate.requires_grad()) node->up = SavedTensor(up);  // only dgate reads up
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace

Tensor gelu(const Tensor& x, GeluApprox approx) {
  OpScope scope("gelu");
  detail::check_floating("gelu", x);
  const bool tanh_approx = approx == GeluApprox::tanh;
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (Kernels* kern = runs(out)) kern->gelu_forward(current_stream(out.device()), out, x, tanh_approx);
  if (autograd::needs_grad(x)) {
    auto node = autograd::make_node<GeluBackward>({&x});
    node->x = SavedTensor(x);
    node->tanh_approx = tanh_approx;
    autograd::set_history(out, node);
  }
  return out;
}

Tensor silu(const Tensor& x) {
  OpScope scope("silu");
  detail::check_floating("silu", x);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (Kernels* kern = runs(out)) kern->silu_forward(current_stream(out.device()), out, x);
  if (autograd::needs_grad(x)) {
    auto node = autograd::make_node<SiluBackward>({&x});
    node->x = SavedTensor(x);
    autograd::set_history(out, node);
  }
  return out;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) { return gated(gate, up, GluActivation::silu); }

Tensor geglu(const Tensor& gate, const Tensor& up) { return gated(gate, up, GluActivation::gelu_tanh); }

}  // namespace tidal
