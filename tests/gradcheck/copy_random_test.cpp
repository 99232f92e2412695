#include "tests/support/gradcheck.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal {
using testing::gradcheck;
using testing::uniform;

TEST(GradcheckCopy, CloneContiguousAndDtypeRoundTrip) {
  Tensor a = uniform({3, 4}, 1);
  EXPECT_TRUE(gradcheck([](auto& x) { return x[0].t().contiguous(); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return mul(x[0].clone(), x[0]); }, {a}));
  // Through f32 and back: the gradient is exact, the values carry f32 rounding (so a loose check).
  testing::GradcheckOptions loose;
  loose.eps = 1e-3;
  loose.atol = 1e-4;
  loose.rtol = 1e-3;
  EXPECT_TRUE(gradcheck([](auto& x) { return x[0].to(DType::f32).to(DType::f64); }, {a}, loose));
}

TEST(GradcheckRandom, DropoutWithTheRngStateRestored) {
  Tensor a = uniform({4, 16}, 2);
  manual_seed(5);
  const RngState st = get_rng_state();
  // Each evaluation restores the state, so every call draws the same mask.
  EXPECT_TRUE(gradcheck(
      [&](auto& x) {
        set_rng_state(st);
        return dropout(x[0], 0.3);
      },
      {a}));
}

TEST(Random, DropoutMaskStatisticsAndReplay) {
  manual_seed(11);
  Tensor x = ones({1 << 16});
  const RngState st = get_rng_state();
  Tensor y = dropout(x, 0.25);
  const double kept = mean(ne(y, 0.0).to(DType::f32)).item<double>();
  EXPECT_NEAR(kept, 0.75, 0.01);
  EXPECT_NEAR(max(y).item<double>(), 1.0 / 0.75, 1e-6);  // survivors are scaled by 1/(1-p)
  set_rng_state(st);
  EXPECT_TRUE(testing::bitwise_equal(dropout(x, 0.25), y));   // same state, same mask
  EXPECT_FALSE(testing::bitwise_equal(dropout(x, 0.25), y));  // the stream moved on
  EXPECT_TRUE(testing::bitwise_equal(dropout(x, 0.0), x));
  EXPECT_TRUE(testing::bitwise_equal(dropout(x, 0.5, /*training=*/false), x));
  EXPECT_THROW(dropout(x, 1.0), Error);
  EXPECT_THROW(dropout(x, -0.1), Error);
  EXPECT_THROW(dropout(x.to(DType::i64), 0.1), Error);
}

TEST(Random, NormalAndUniformMoments) {
  manual_seed(3);
  Tensor n = randn({1 << 18});
  EXPECT_NEAR(mean(n).item<double>(), 0.0, 0.01);
  EXPECT_NEAR(mean(square(n)).item<double>(), 1.0, 0.01);
  Tensor u = rand({1 << 18});
  EXPECT_NEAR(mean(u).item<double>(), 0.5, 0.005);
  EXPECT_GE(-max(neg(u)).item<double>(), 0.0);
  Tensor r = randint(3, 7, {1000});
  for (int64_t v : r.to_vector<int64_t>()) ASSERT_TRUE(v >= 3 && v < 7);
  EXPECT_THROW(randint(5, 5, {3}), Error);
}

}  // namespace tidal
