#pragma once
// Philox4x32-10, a counter-based RNG (Salmon et al., SC'11): the random numbers of element i depend
// only on (seed, offset + i), never on threads or call order. That is what lets a recompute replay
// dropout masks exactly.
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tidal::cpu {

inline std::array<uint32_t, 4> philox4x32(uint64_t counter, uint64_t key) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

// out[4 * i + lane] = philox4x32(first + i, key)[lane] for i < blocks: the same numbers as above,
// 32 blocks at a time: four independent chains of 8 blocks in 64-bit vector lanes holding 32-bit
// words (GCC vector extensions; AVX-512 where available), so the multiplies' latency overlaps.
inline void philox4x32_fill(uint64_t first, uint64_t key, int64_t blocks, uint32_t* out) {
  typedef uint64_t v8 __attribute__((vector_size(64)));
  constexpr int kChains = 4, kStep = 8 * kChains;
  const v8 lo32 = v8{} + 0xffffffffull;
  const v8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  [[maybe_unused]] const v8 m0 = v8{} + 0xD2511F53ull, m1 = v8{} + 0xCD9E8D57ull;
  for (int64_t base = 0; base < blocks; base += kStep) {
    v8 c0[kChains], c1[kChains], c2[kChains], c3[kChains];
    for (int q = 0; q < kChains; ++q) {
      const v8 ctr = (v8{} + (first + uint64_t(base + 8 * q))) + lane;
      c0[q] = ctr & lo32;
      c1[q] = ctr >> 32;
      c2[q] = v8{};
      c3[q] = v8{};
    }
    uint64_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
    for (int r = 0; r < 10; ++r) {
      for (int q = 0; q < kChains; ++q) {
#if defined(__AVX512F__)
        // vpmuludq multiplies the low 32 bits of each lane and ignores the high ones, so the lanes
        // may carry garbage above bit 31: no masking until the words are stored.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12's _mm512_undefined_epi32 in the intrinsic
        const v8 p0 = (v8)_mm512_mul_epu32((__m512i)c0[q], (__m512i)m0);
        const v8 p1 = (v8)_mm512_mul_epu32((__m512i)c2[q], (__m512i)m1);
#pragma GCC diagnostic pop
        const v8 n0 = (p1 >> 32) ^ c1[q] ^ k0, n2 = (p0 >> 32) ^ c3[q] ^ k1;
        c1[q] = p1;
        c3[q] = p0;
#else
        const v8 p0 = c0[q] * 0xD2511F53ull, p1 = c2[q] * 0xCD9E8D57ull;
        const v8 n0 = ((p1 >> 32) ^ c1[q] ^ k0) & lo32, n2 = ((p0 >> 32) ^ c3[q] ^ k1) & lo32;
        c1[q] = p1 & lo32;
        c3[q] = p0 & lo32;
#endif
        c0[q] = n0;
        c2[q] = n2;
      }
      k0 = uint32_t(k0 + 0x9E3779B9u);
      k1 = uint32_t(k1 + 0xBB67AE85u);
    }
    // Interleave into block order through plain arrays (extracting vector elements is slow).
    alignas(64) uint64_t w[4][kStep];
    for (int q = 0; q < kChains; ++q) {
      std::memcpy(w[0] + 8 * q, &c0[q], 64);
      std::memcpy(w[1] + 8 * q, &c1[q], 64);
      std::memcpy(w[2] + 8 * q, &c2[q], 64);
      std::memcpy(w[3] + 8 * q, &c3[q], 64);
    }
    const int64_t n = blocks - base < kStep ? blocks - base : kStep;
    uint32_t* o = out + 4 * base;
    for (int64_t j = 0; j < n; ++j)
      for (int e = 0; e < 4; ++e) o[4 * j + e] = uint32_t(w[e][j]);
  }
}

// Uniform in [0, 1) with 24 random bits.
inline float u32_to_unit(uint32_t u) { return float(u >> 8) * (1.0f / 16777216.0f); }

// The uniform number of stream position `pos` (4 numbers per Philox block).
inline float philox_uniform(uint64_t seed, uint64_t pos) { return u32_to_unit(philox4x32(pos / 4, seed)[pos % 4]); }

// A standard normal for stream position `pos` (Box-Muller on the block's lane pairs).
inline float philox_normal(uint64_t seed, uint64_t pos) {
  const std::array<uint32_t, 4> r = philox4x32(pos / 4, seed);
  const int lane = int(pos % 4), pair = lane / 2 * 2;
  const float u1 = (float(r[size_t(pair)] >> 8) + 1.0f) * (1.0f / 16777216.0f);  // (0, 1]
  const float u2 = u32_to_unit(r[size_t(pair + 1)]);
  const float radius = std::sqrt(-2.0f * std::log(u1));
  const float angle = 6.2831853071795864f * u2;
  return lane % 2 == 0 ? radius * std::cos(angle) : radius * std::sin(angle);
}

}  // namespace tidal::cpu
