#pragma once
// The Philox stream (base/philox.h) drawn 32 blocks at a time with vector instructions.
#include <cstdint>
#include <cstring>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "tidal/base/philox.h"

namespace tidal::cpu {

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

}  // namespace tidal::cpu
