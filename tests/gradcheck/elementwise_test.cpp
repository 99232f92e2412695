#include "tidal/ops/elementwise.h"
#include "tests/support/gradcheck.h"
#include "tidal/ops/reduce.h"

namespace tidal {
using testing::gradcheck;
using testing::uniform;

TEST(GradcheckElementwise, BinaryWithBroadcasting) {
  Tensor a = uniform({2, 3, 4}, 1), b = uniform({3, 1}, 2, 0.5, 1.5);
  EXPECT_TRUE(gradcheck([](auto& x) { return add(x[0], x[1], 0.7); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& x) { return sub(x[0], x[1], 1.3); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& x) { return mul(x[0], x[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& x) { return div(x[0], x[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& x) { return maximum(x[0], x[1]); }, {a, uniform({4}, 3)}));
  EXPECT_TRUE(gradcheck([](auto& x) { return minimum(x[0], x[1]); }, {a, uniform({4}, 4)}));
}

TEST(GradcheckElementwise, PowTensorTensor) {
  Tensor a = uniform({3, 4}, 5, 0.5, 2.0), b = uniform({4}, 6, -1.5, 1.5);
  EXPECT_TRUE(gradcheck([](auto& x) { return pow(x[0], x[1]); }, {a, b}));
}

TEST(GradcheckElementwise, Scalars) {
  Tensor a = uniform({3, 5}, 7, 0.5, 2.0);
  EXPECT_TRUE(gradcheck([](auto& x) { return add(x[0], 2.5); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return sub(x[0], 2.5); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return rsub(x[0], 2.5); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return mul(x[0], -1.5); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return div(x[0], 4.0); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return rdiv(x[0], 3.0); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return pow(x[0], 3.0); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return pow(x[0], -0.5); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return pow(x[0], 2.0); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return clamp(x[0], 0.8, 1.6); }, {a}));
}

TEST(GradcheckElementwise, Unary) {
  Tensor a = uniform({4, 6}, 8, -2.0, 2.0);
  Tensor pos = uniform({4, 6}, 9, 0.2, 3.0);
  EXPECT_TRUE(gradcheck([](auto& x) { return neg(x[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return exp(x[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return log(x[0]); }, {pos}));
  EXPECT_TRUE(gradcheck([](auto& x) { return sqrt(x[0]); }, {pos}));
  EXPECT_TRUE(gradcheck([](auto& x) { return rsqrt(x[0]); }, {pos}));
  EXPECT_TRUE(gradcheck([](auto& x) { return abs(x[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return tanh(x[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return sigmoid(x[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return relu(x[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return square(x[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return sin(x[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return cos(x[0]); }, {a}));
}

TEST(GradcheckElementwise, WhereAndMaskedFill) {
  Tensor a = uniform({3, 4}, 10), b = uniform({4}, 11);
  Tensor cond = gt(uniform({3, 4}, 12, -1, 1, false), 0.0);
  EXPECT_TRUE(gradcheck([&](auto& x) { return where(cond, x[0], x[1]); }, {a, b}));
  Tensor mask = gt(uniform({1, 4}, 13, -1, 1, false), 0.0);
  EXPECT_TRUE(gradcheck([&](auto& x) { return masked_fill(x[0], mask, -7.0); }, {a}));
}

TEST(GradcheckElementwise, NonContiguousInputs) {
  Tensor a = uniform({4, 3}, 14), b = uniform({3, 4}, 15);
  EXPECT_TRUE(gradcheck([](auto& x) { return mul(x[0].t(), exp(x[1])); }, {a, b}));
}

}  // namespace tidal
