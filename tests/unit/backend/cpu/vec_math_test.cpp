#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tidal/backend/cpu/vec_math.h"

namespace tidal {

TEST(VecMath, ExpMatchesLibmToAFewUlp) {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.0137f) {
    const double ref = std::exp(double(x));
    const double rel = std::abs(double(cpu::fast_exp(x)) - ref) / ref;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 3e-7);
  EXPECT_EQ(cpu::fast_exp(0.0f), 1.0f);
  EXPECT_EQ(cpu::fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::fast_exp(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isinf(cpu::fast_exp(1000.0f)) || cpu::fast_exp(1000.0f) > 1e38f);
  EXPECT_TRUE(std::isnan(cpu::fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace tidal
