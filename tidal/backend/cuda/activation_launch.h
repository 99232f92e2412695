#pragma once
// The activation family's launchers (activation.cu), called by activation.cpp: the CPU backend's formulas
// (backend/cpu/activation.h), over operands of one floating dtype viewed with the output's shape (any
// strides); n is the output's element count.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "tidal/backend/cuda/strided.h"
#include "tidal/seam/kernel_args.h"

namespace tidal::cuda {

// out = gelu(x): the tanh form (tanh_approx) or the exact erf form.
void launch_gelu_forward(cudaStream_t stream, const Strided& out, const Strided& x, int64_t n, bool tanh_approx);
// dx = g * gelu'(x).
void launch_gelu_backward(cudaStream_t stream, const Strided& dx, const Strided& g, const Strided& x, int64_t n,
                          bool tanh_approx);
// out = x * sigmoid(x); dx = g * silu'(x).
void launch_silu_forward(cudaStream_t stream, const Strided& out, const Strided& x, int64_t n);
void launch_silu_backward(cudaStream_t stream, const Strided& dx, const Strided& g, const Strided& x, int64_t n);
// out = act(gate) * up.
void launch_glu_forward(cudaStream_t stream, const Strided& out, const Strided& gate, const Strided& up, int64_t n,
                        GluActivation act);
// dgate = g * up * act'(gate), dup = g * act(gate); an output whose data is null is not written.
void launch_glu_backward(cudaStream_t stream, const Strided& dgate, const Strided& dup, const Strided& g,
                         const Strided& gate, const Strided& up, int64_t n, GluActivation act);

}  // namespace tidal::cuda
