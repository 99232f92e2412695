#pragma once
// CPU kernels of the eager attention path: the fused scale + causal mask + softmax over scores that
// the eager path materializes (Megatron's FusedScaleMaskSoftmax), and the exp both attention
// kernels share so that eager and flash round alike.
#include <bit>
#include <cmath>
#include <cstdint>

#include "tidal/tensor.h"

namespace tidal::cpu {

// exp for softmax rows: Cephes' expf polynomial (about 1 ulp on [-87, 88], 0 below -87, where the
// probability underflows anyway); written branch-free so `#pragma omp simd` loops vectorize it, which
// libm's expf does not without -ffast-math. f64 (gradchecks) uses std::exp.
inline float softmax_exp(float x) {
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;             // x - n ln 2, in two parts
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((int32_t(n) + 127) << 23);
  return x < -87.0f ? 0.0f : y * two_n;
}
inline double softmax_exp(double x) { return std::exp(x); }

// max(init, x[0..n)) and, below, the exp-sum of a row, with 16 independent lanes so that they
// vectorize (an omp simd max-reduction compiles to a shuffle tree per row); tails run scalar.
template <typename A>
A row_max(const A* x, int64_t n, A init) {
  A acc[16];
  for (int k = 0; k < 16; ++k) acc[k] = init;
  int64_t c = 0;
  for (; c + 16 <= n; c += 16)
    for (int k = 0; k < 16; ++k) acc[k] = acc[k] > x[c + k] ? acc[k] : x[c + k];
  for (; c < n; ++c) acc[0] = acc[0] > x[c] ? acc[0] : x[c];
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] = acc[k] > acc[k + w] ? acc[k] : acc[k + w];
  return acc[0];
}

// x[j] = exp(x[j] - shift) over [0, n); returns the sum of the new x.
template <typename A>
A exp_row(A* x, int64_t n, A shift) {
  A acc[16] = {};
  int64_t c = 0;
  for (; c + 16 <= n; c += 16)
    for (int k = 0; k < 16; ++k) {
      const A e = softmax_exp(x[c + k] - shift);
      x[c + k] = e;
      acc[k] += e;
    }
  for (; c < n; ++c) {
    x[c] = softmax_exp(x[c] - shift);
    acc[0] += x[c];
  }
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

// Keys a query row sees: all S, or under the bottom-right-aligned causal mask those j <= i + S - T
// (flash-attention's convention; rows with i < T - S see none and get probability 0).
inline int64_t visible_keys(bool causal, int64_t i, int64_t t, int64_t s) {
  if (!causal) return s;
  const int64_t n = i + s - t + 1;
  return n < 0 ? 0 : (n > s ? s : n);
}

// probs = softmax(scale * scores) per row with the causal mask; both contiguous (..., T, S).
void scaled_masked_softmax_forward(const Tensor& probs, const Tensor& scores, double scale, bool causal);
// grad_scores = scale * probs * (grad_probs - rowsum(grad_probs * probs)); all contiguous (..., T, S).
void scaled_masked_softmax_backward(const Tensor& grad_scores, const Tensor& grad_probs, const Tensor& probs,
                                    double scale);

}  // namespace tidal::cpu
