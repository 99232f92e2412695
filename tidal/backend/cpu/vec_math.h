#pragma once
// Math that the compiler can vectorize. glibc's vector expf (libmvec) is only used under
// -ffast-math, which tidal does not use, so std::exp in a loop stays scalar; vexp below is plain
// arithmetic (Cephes' expf: range reduction by ln 2, degree-6 polynomial, 2^n from the exponent
// bits), accurate to ~1.5e-7 relative, and vectorizes under `#pragma omp simd`. f64 keeps std::exp.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace tidal::cpu {

inline float vexp(float x) {
  const float lo = -87.33654f, hi = 88.72283f;
  const bool underflow = x < lo;
  const float xc = x < lo ? lo : (x > hi ? hi : x);  // NaN passes through
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  const float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r2 + r + 1.0f;
  const int32_t e = int32_t(n) + 127;
  const uint32_t bits = uint32_t(e < 1 ? 1 : e) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return underflow ? 0.0f : y * scale;
}
inline double vexp(double x) { return std::exp(x); }

template <typename A>
inline A vsigmoid(A x) {
  return A(1) / (A(1) + vexp(-x));
}

}  // namespace tidal::cpu
