#pragma once
// Activation functions of transformer MLPs, each with a fused backward kernel. They save their
// inputs only (the output is recomputed from them in the backward kernel for free).
#include "tidal/seam/kernel_args.h"  // GluActivation
#include "tidal/tensor.h"

namespace tidal {

enum class GeluApprox { none, tanh };

// x * Phi(x); `tanh` is GPT-2's gelu_new (PyTorch approximate="tanh"), `none` the exact erf form.
Tensor gelu(const Tensor& x, GeluApprox approx = GeluApprox::tanh);
// x * sigmoid(x).
Tensor silu(const Tensor& x);
// silu(gate) * up: the Llama/Qwen MLP gate, in one kernel (no silu(gate) intermediate is kept).
// gate and up have one shape (either may be a strided view, e.g. halves of a fused projection).
Tensor swiglu(const Tensor& gate, const Tensor& up);
// gelu(gate) * up with GELU's tanh form (Gemma's gelu_pytorch_tanh MLP), in one kernel likewise.
Tensor geglu(const Tensor& gate, const Tensor& up);

}  // namespace tidal
