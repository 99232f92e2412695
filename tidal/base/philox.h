#pragma once
// Philox4x32-10, a counter-based RNG (Salmon et al., SC'11): the random numbers of element i depend
// only on (seed, offset + i), never on threads or call order. That is what lets a recompute replay
// dropout masks exactly.
// Device-neutral: host code (data shuffling, sampling) and every backend's kernels draw the same numbers.
#include <array>
#include <cmath>
#include <cstdint>

namespace tidal {

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

}  // namespace tidal
