#pragma once
// CPU kernels of the activation family (gelu, silu, and the gated swiglu / geglu); the vectorizable math they use is in
// vec_math.h. Inputs may have any strides (elementwise_loops.h); outputs are preallocated by the op
// layer.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tidal/backend/cpu/vec_math.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

// gelu(x) = x * Phi(x). The tanh form (GPT-2's gelu_new) uses 0.5 * (1 + tanh(u)) = sigmoid(2u),
// u = sqrt(2/pi) * (x + 0.044715 x^3): one exp and no cancellation near 0.
template <typename A>
[[gnu::always_inline]] inline A gelu_tanh(A x) {
  const A u2 = A(2 * 0.7978845608028654) * (x + A(0.044715) * x * x * x);
  return x * fast_sigmoid(u2);
}
template <typename A>
[[gnu::always_inline]] inline A gelu_tanh_grad(A x) {
  const A s = fast_sigmoid(A(2 * 0.7978845608028654) * (x + A(0.044715) * x * x * x));
  const A du2 = A(2 * 0.7978845608028654) * (A(1) + A(3 * 0.044715) * x * x);
  return s + x * s * (A(1) - s) * du2;
}
template <typename A>
[[gnu::always_inline]] inline A gelu_erf(A x) {
  return A(0.5) * x * (A(1) + fast_erf(x * A(0.7071067811865476)));
}
template <typename A>
[[gnu::always_inline]] inline A gelu_erf_grad(A x) {
  const A cdf = A(0.5) * (A(1) + fast_erf(x * A(0.7071067811865476)));
  return cdf + x * A(0.3989422804014327) * fast_exp(A(-0.5) * x * x);
}

}  // namespace tidal::cpu
