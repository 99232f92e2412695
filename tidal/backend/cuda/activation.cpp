// The activation family's methods of CudaKernels: checks and arguments, then activation.cu's launchers.
// Inputs may have any strides (broadcast to the output's shape, as the CPU backend's loops).
#include <initializer_list>

#include "tidal/backend/cuda/activation_launch.h"
#include "tidal/backend/cuda/kernels.h"
#include "tidal/backend/cuda/stream.h"
#include "tidal/backend/cuda/tensor_args.h"
#include "tidal/base/error.h"
#include "tidal/tensor.h"

namespace tidal::cuda {
namespace {

// Every defined operand floating and of one dtype.
void check_operands(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor& first = **ts.begin();
  TIDAL_CHECK(is_floating(first.dtype()), "[", op, "] expects a floating tensor (f32, bf16 or f64), got ",
              first.dtype());
  for (const Tensor* t : ts)
    TIDAL_ASSERT(!t->defined() || t->dtype() == first.dtype(), "[", op, "] dtypes differ: ", t->dtype(), " and ",
                 first.dtype());
}

}  // namespace

// out = gelu(x); tanh_approx picks the tanh form over the exact erf form.
void CudaKernels::gelu_forward(Stream& stream, const Tensor& out, const Tensor& x, bool tanh_approx) {
  check_operands("gelu", {&x, &out});
  launch_gelu_forward(stream_handle(stream), strided(out), strided(x, out.shape()), out.numel(), tanh_approx);
}

// dx = g * gelu'(x).
void CudaKernels::gelu_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x, bool tanh_approx) {
  check_operands("gelu", {&x, &g, &dx});
  const Shape& shape = dx.shape();
  launch_gelu_backward(stream_handle(stream), strided(dx), strided(g, shape), strided(x, shape), dx.numel(),
                       tanh_approx);
}

// out = x * sigmoid(x).
void CudaKernels::silu_forward(Stream& stream, const Tensor& out, const Tensor& x) {
  check_operands("silu", {&x, &out});
  launch_silu_forward(stream_handle(stream), strided(out), strided(x, out.shape()), out.numel());
}

void CudaKernels::silu_backward(Stream& stream, const Tensor& dx, const Tensor& g, const Tensor& x) {
  check_operands("silu", {&x, &g, &dx});
  const Shape& shape = dx.shape();
  launch_silu_backward(stream_handle(stream), strided(dx), strided(g, shape), strided(x, shape), dx.numel());
}

// out = act(gate) * up.
void CudaKernels::glu_forward(Stream& stream, const Tensor& out, const Tensor& gate, const Tensor& up,
                              GluActivation act) {
  check_operands(glu_name(act), {&gate, &up, &out});
  const Shape& shape = out.shape();
  launch_glu_forward(stream_handle(stream), strided(out), strided(gate, shape), strided(up, shape), out.numel(), act);
}

// dgate = g * up * act'(gate), dup = g * act(gate), in one pass; either may be undefined (not needed).
void CudaKernels::glu_backward(Stream& stream, const Tensor& dgate, const Tensor& dup, const Tensor& g,
                               const Tensor& gate, const Tensor& up, GluActivation act) {
  check_operands(glu_name(act), {&gate, &up, &g, &dgate, &dup});
  if (!dgate.defined() && !dup.defined()) return;
  const Tensor& first = dgate.defined() ? dgate : dup;
  const Shape& shape = first.shape();
  TIDAL_ASSERT(!dgate.defined() || !dup.defined() || dgate.shape() == dup.shape(), "[", glu_name(act),
               "] gradient shapes differ: ", dgate.shape(), " and ", dup.shape());
  const Strided dg = dgate.defined() ? strided(dgate) : Strided{};
  const Strided du = dup.defined() ? strided(dup) : Strided{};
  launch_glu_backward(stream_handle(stream), dg, du, strided(g, shape), strided(gate, shape), strided(up, shape),
                      first.numel(), act);
}

}  // namespace tidal::cuda
