// The CUDA backend's Philox port (backend/cuda/philox.cuh), compiled for the host, against base/philox.h:
// the same bits for many keys and counters, so the GPU's dropout masks and uniforms are the CPU's. Runs
// without a GPU (no TIDAL_REQUIRE_CUDA): the device path differs only in __umulhi for the high product
// and in how cos/sin of the normals are evaluated (checked on a GPU by random_test.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "tidal/backend/cuda/philox.cuh"
#include "tidal/base/philox.h"

namespace tidal {
namespace {

uint64_t next(uint64_t& s) {  // splitmix64
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

TEST(CudaPhiloxPort, BlocksMatchTheCpuForManyKeysAndCounters) {
  uint64_t s = 42;
  const uint64_t edge[] = {0, 1, 3, 4, 0xffffffffull, 0x100000000ull, ~0ull, ~0ull - 1, 0x8000000000000000ull};
  for (int i = 0; i < 20000; ++i) {
    const uint64_t key = i < 81 ? edge[i % 9] : next(s), counter = i < 81 ? edge[i / 9] : next(s);
    const auto want = philox4x32(counter, key);
    const cuda::Philox4 got = cuda::philox4x32(counter, key);
    for (int l = 0; l < 4; ++l) {
      ASSERT_EQ(got.v[l], want[size_t(l)]) << "key " << key << " counter " << counter << " lane " << l;
      ASSERT_EQ(cuda::philox_lane(got, l), want[size_t(l)]);
    }
  }
}

TEST(CudaPhiloxPort, UniformsAreBitIdentical) {
  uint64_t s = 7;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t seed = next(s), pos = i < 1000 ? uint64_t(i) : next(s);
    ASSERT_EQ(bits(cuda::philox_uniform(seed, pos)), bits(philox_uniform(seed, pos))) << seed << " " << pos;
  }
}

TEST(CudaPhiloxPort, NormalsAgreeWithTheCpuToAFewUlp) {
  uint64_t s = 9;
  int exact = 0;
  constexpr int kN = 40000;
  for (int i = 0; i < kN; ++i) {
    const uint64_t seed = next(s), pos = i < 1000 ? uint64_t(i) : next(s);
    const float got = cuda::philox_normal(seed, pos), want = philox_normal(seed, pos);
    ASSERT_TRUE(std::isfinite(got));
    const int64_t ulps = std::llabs(int64_t(int32_t(bits(got))) - int64_t(int32_t(bits(want))));
    ASSERT_LE(ulps, 4) << "seed " << seed << " pos " << pos << ": " << got << " vs " << want;
    exact += ulps == 0;
  }
  EXPECT_GE(exact, kN * 95 / 100);  // almost all bit-identical (98.5% over 10^6 draws; at most 3 ulp apart)
}

}  // namespace
}  // namespace tidal
