#pragma once
// CPU kernels of the activation family (gelu, silu, swiglu), and the vectorizable math they share
// with the softmax and loss kernels. Inputs may have any strides (elementwise_loops.h); outputs are
// preallocated by the op layer.
//
// Note [Vectorizable math]: glibc's expf/erff are scalar calls that stop `omp simd` from vectorizing
// a loop (libmvec is only used under -ffast-math), and exp dominates softmax and cross-entropy. So f32
// uses the branch-free polynomial versions below (exp: Cephes, ~1 ulp on [-87, 88]; erf: Abramowitz
// & Stegun 7.1.26, |error| < 1.5e-7, as PyTorch's vectorized erf). f64 keeps std:: for gradchecks.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "tidal/tensor.h"

namespace tidal::cpu {

inline float fast_exp(float x) {
  constexpr float kHi = 88.3762626647949f, kLo = -87.3365478515625f;  // ln(FLT_MAX), ln(FLT_MIN)
  const float xc = x > kHi ? kHi : (x < kLo ? kLo : x);
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);  // x = n ln2 + r, |r| <= ln2 / 2
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;     // ln2 in two parts (exact n * hi)
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  float y = p * std::bit_cast<float>((int32_t(n) + 127) << 23);
  y = x < kLo ? 0.0f : y;  // would be subnormal: flush (and exp(-inf) = 0)
  y = x > kHi ? std::numeric_limits<float>::infinity() : y;
  return x != x ? x : y;   // NaN stays NaN
}
inline double fast_exp(double x) { return std::exp(x); }

inline float fast_erf(float x) {
  const float a = std::fabs(x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * fast_exp(-a * a);
  return x < 0.0f ? -y : y;
}
inline double fast_erf(double x) { return std::erf(x); }

template <typename A>
inline A fast_sigmoid(A x) {
  return A(1) / (A(1) + fast_exp(-x));
}

// gelu(x) = x * Phi(x). The tanh form (GPT-2's gelu_new) uses 0.5 * (1 + tanh(u)) = sigmoid(2u),
// u = sqrt(2/pi) * (x + 0.044715 x^3): one exp and no cancellation near 0.
template <typename A>
inline A gelu_tanh(A x) {
  const A u2 = A(2 * 0.7978845608028654) * (x + A(0.044715) * x * x * x);
  return x * fast_sigmoid(u2);
}
template <typename A>
inline A gelu_tanh_grad(A x) {
  const A s = fast_sigmoid(A(2 * 0.7978845608028654) * (x + A(0.044715) * x * x * x));
  const A du2 = A(2 * 0.7978845608028654) * (A(1) + A(3 * 0.044715) * x * x);
  return s + x * s * (A(1) - s) * du2;
}
template <typename A>
inline A gelu_erf(A x) {
  return A(0.5) * x * (A(1) + fast_erf(x * A(0.7071067811865476)));
}
template <typename A>
inline A gelu_erf_grad(A x) {
  const A cdf = A(0.5) * (A(1) + fast_erf(x * A(0.7071067811865476)));
  return cdf + x * A(0.3989422804014327) * fast_exp(A(-0.5) * x * x);
}

// out = gelu(x); tanh_approx picks the tanh form over the exact erf form.
void gelu_forward(const Tensor& out, const Tensor& x, bool tanh_approx);
// dx = g * gelu'(x).
void gelu_backward(const Tensor& dx, const Tensor& g, const Tensor& x, bool tanh_approx);
// out = x * sigmoid(x).
void silu_forward(const Tensor& out, const Tensor& x);
void silu_backward(const Tensor& dx, const Tensor& g, const Tensor& x);
// out = silu(gate) * up.
void swiglu_forward(const Tensor& out, const Tensor& gate, const Tensor& up);
// dgate = g * up * silu'(gate), dup = g * silu(gate), in one pass; either may be undefined (not needed).
void swiglu_backward(const Tensor& dgate, const Tensor& dup, const Tensor& g, const Tensor& gate, const Tensor& up);

}  // namespace tidal::cpu
