#pragma once
// Math that GCC vectorizes, shared by every kernel family (activation, softmax, loss, norm,
// attention, elementwise).
//
// Note [Vectorizable math]: glibc's expf/erff are scalar calls that stop `omp simd` from vectorizing
// a loop (libmvec is only used under -ffast-math), and exp dominates softmax and cross-entropy. So f32
// uses the polynomial versions below (exp: Cephes, ~1 ulp; erf: Abramowitz & Stegun 7.1.26,
// |error| < 1.5e-7, as PyTorch's vectorized erf); f64 keeps std:: for gradchecks. GCC 12 vectorizes
// them only if (1) they are inlined (always_inline; loops calling lambdas are marked flatten),
// (2) no std::floor/fmin (kept scalar under -ftrapping-math), (3) special cases are selected on
// integers (float selects after a float clamp get jump-threaded into branches), and (4) pointers
// used in a loop are locals, not members of a captured object (else GCC gathers them per lane).
// BFloat16's constructor returns early for NaN, which also keeps a loop scalar: kernels store through
// store_as<T>, the same rounding written as a select. Checked by Activation.FastMath* and the benches.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tidal/dtype.h"

namespace tidal::cpu {

// v rounded to T (round to nearest even for bf16, NaN stays a quiet NaN), vectorizable.
template <typename T, typename A>
[[gnu::always_inline]] inline T store_as(A v) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    const uint32_t u = std::bit_cast<uint32_t>(float(v));
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    BFloat16 b;
    b.bits = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? (u >> 16) | 0x40u : rounded);
    return b;
  } else {
    return T(v);
  }
}

// A row of n values in the accumulate type: the row itself when T is that type, else converted into
// `buf` (n values). Row kernels then run one f32 loop body for f32 and bf16 alike.
template <typename T>
inline const acc_t<T>* acc_row(const T* row, int64_t n, acc_t<T>* buf) {
  if constexpr (std::is_same_v<T, acc_t<T>>) {
    return row;
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) buf[i] = acc_t<T>(row[i]);
    return buf;
  }
}

[[gnu::always_inline]] inline float fast_exp(float x) {
  // Range and special cases are decided on integers: float selects after a float clamp let GCC thread
  // jumps (under -ftrapping-math) and the loop stays scalar.
  const float xc = std::min(std::max(x, -100.0f), 100.0f);  // NaN passes through
  // x = n ln2 + r with n = round(x / ln2), |r| <= ln2 / 2. Adding 1.5 * 2^23 rounds to an integer held
  // in t's low mantissa bits (std::floor would not vectorize either).
  const float t = xc * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  const float r = xc - n * 0.693359375f + n * 2.12194440e-4f;  // ln2 in two parts (n * hi is exact)
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const int32_t ni = std::bit_cast<int32_t>(t) - 0x4B400000;  // n, in [-145, 145] unless x is NaN
  const int32_t e = std::min(std::max(ni, -126), 127) + 127;
  uint32_t y = std::bit_cast<uint32_t>(p * std::bit_cast<float>(e << 23));
  y = ni < -126 ? 0u : y;          // would be subnormal: flush (and exp(-inf) = 0)
  y = ni > 127 ? 0x7f800000u : y;  // inf
  const uint32_t xb = std::bit_cast<uint32_t>(x);
  y = (xb & 0x7fffffffu) > 0x7f800000u ? xb : y;  // NaN stays NaN
  return std::bit_cast<float>(y);
}
inline double fast_exp(double x) { return std::exp(x); }

[[gnu::always_inline]] inline float fast_erf(float x) {
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
[[gnu::always_inline]] inline A fast_sigmoid(A x) {
  return A(1) / (A(1) + fast_exp(-x));
}

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
      const A e = fast_exp(x[c + k] - shift);
      x[c + k] = e;
      acc[k] += e;
    }
  for (; c < n; ++c) {
    x[c] = fast_exp(x[c] - shift);
    acc[0] += x[c];
  }
  for (int w = 8; w >= 1; w /= 2)
    for (int k = 0; k < w; ++k) acc[k] += acc[k + w];
  return acc[0];
}

}  // namespace tidal::cpu
