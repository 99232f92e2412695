// The CPU backend's fast math against libm and BFloat16's own rounding (moved from the activation tests).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "tidal/backend/cpu/activation.h"

namespace tidal {

TEST(CpuFastMath, AccuracyAndSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  double worst = 0;
  for (int i = -87000; i <= 88000; ++i) {
    const float x = float(i) * 1e-3f;
    const double ref = std::exp(double(x));
    worst = std::max(worst, std::abs(double(cpu::fast_exp(x)) - ref) / ref);
  }
  EXPECT_LT(worst, 3e-7);  // ~2 ulp
  EXPECT_EQ(cpu::fast_exp(-inf), 0.0f);
  EXPECT_EQ(cpu::fast_exp(-200.0f), 0.0f);
  EXPECT_EQ(cpu::fast_exp(inf), inf);
  EXPECT_EQ(cpu::fast_exp(100.0f), inf);
  EXPECT_EQ(cpu::fast_exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(cpu::fast_exp(std::numeric_limits<float>::quiet_NaN())));
  double worst_erf = 0;
  for (int i = -6000; i <= 6000; ++i) {
    const float x = float(i) * 1e-3f;
    worst_erf = std::max(worst_erf, std::abs(double(cpu::fast_erf(x)) - std::erf(double(x))));
  }
  EXPECT_LT(worst_erf, 5e-7);  // A&S 7.1.26's 1.5e-7 plus f32 rounding
  // store_as<BFloat16> is BFloat16's rounding, bit for bit (ties, NaN, inf, subnormals).
  int mismatches = 0;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 0x10001ull) {  // ~65k patterns over the whole range
    for (uint32_t low : {0x0000u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const float f = std::bit_cast<float>((uint32_t(u) & 0xffff0000u) | low);
      if (cpu::store_as<BFloat16>(f).bits != BFloat16(f).bits) ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

}  // namespace tidal
