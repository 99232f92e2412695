#pragma once
// Philox4x32-10 (tidal/base/philox.h) for the device, giving the same bits as the CPU backend for the same
// key and counter: a dropout mask recomputed on the GPU, or drawn on the GPU and on the CPU, is the same
// mask. Host and device functions under nvcc; plain inline functions under a host compiler, so that
// tests/cuda/philox_port_test.cpp checks the port against base/philox.h on a machine without a GPU.
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define TIDAL_PHILOX_FN __host__ __device__ __forceinline__
#else
#define TIDAL_PHILOX_FN inline
#endif

namespace tidal::cuda {

struct Philox4 {
  uint32_t v[4];
};

// The high and low 32 bits of a * b.
TIDAL_PHILOX_FN uint32_t philox_mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __umulhi(a, b);
#else
  return uint32_t((uint64_t(a) * b) >> 32);
#endif
}

TIDAL_PHILOX_FN Philox4 philox4x32(uint64_t counter, uint64_t key) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int r = 0; r < 10; ++r) {
    const uint32_t hi0 = philox_mulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = philox_mulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c1 = lo1;
    c3 = lo0;
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// The lane of a block: v[lane] with a switch, so that device code never indexes a local array.
TIDAL_PHILOX_FN uint32_t philox_lane(const Philox4& r, int lane) {
  return lane == 0 ? r.v[0] : lane == 1 ? r.v[1] : lane == 2 ? r.v[2] : r.v[3];
}

// Uniform in [0, 1) with 24 random bits (exact: the same float on every device).
TIDAL_PHILOX_FN float philox_unit(uint32_t u) { return float(u >> 8) * (1.0f / 16777216.0f); }

// The uniform number of stream position `pos`.
TIDAL_PHILOX_FN float philox_uniform(uint64_t seed, uint64_t pos) {
  return philox_unit(philox_lane(philox4x32(pos / 4, seed), int(pos % 4)));
}

// The standard normal of lane `lane` of block r (Box-Muller on the lane pairs, as base/philox.h). The
// uniforms, the scaling and the square root are exact IEEE float operations, as on the CPU; log, cos
// and sin are computed in double and rounded to float (nearly always the correctly rounded float),
// where the CPU calls glibc's logf/cosf/sinf (< 1 ulp, not always correctly rounded): the normals are
// NOT bit-identical to the CPU's: 98.5% are, the rest differ by at most a few ulp (3 over 10^6 draws;
// tests/cuda/philox_port_test.cpp). Uniforms, integers and dropout masks are bit-identical.
// cos/sin go through sincospi, which needs no large-argument reduction (no local memory).
TIDAL_PHILOX_FN float philox_normal_of(const Philox4& r, int lane) {
  const int pair = lane / 2 * 2;
  const uint32_t a = pair == 0 ? r.v[0] : r.v[2], b = pair == 0 ? r.v[1] : r.v[3];
  const float u1 = (float(a >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
  const float u2 = philox_unit(b);
#if defined(__CUDA_ARCH__)
  const float lg = float(::log(double(u1)));
  const float radius = __fsqrt_rn(__fmul_rn(-2.0f, lg));
  const float angle = __fmul_rn(6.2831853071795864f, u2);
  double s = 0, c = 0;
  ::sincospi(double(angle) * 0.318309886183790671537767526745, &s, &c);
  return lane % 2 == 0 ? __fmul_rn(radius, float(c)) : __fmul_rn(radius, float(s));
#else
  const float lg = float(std::log(double(u1)));
  const float radius = std::sqrt(-2.0f * lg);
  const float angle = 6.2831853071795864f * u2;
  return lane % 2 == 0 ? radius * float(std::cos(double(angle))) : radius * float(std::sin(double(angle)));
#endif
}

TIDAL_PHILOX_FN float philox_normal(uint64_t seed, uint64_t pos) {
  return philox_normal_of(philox4x32(pos / 4, seed), int(pos % 4));
}

}  // namespace tidal::cuda

#undef TIDAL_PHILOX_FN
