// Every op accounts meta tensors exactly like cpu tensors, forward and backward.
#include "tests/support/meta_parity.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"

namespace tidal {
using testing::InputSpec;
using testing::meta_matches_cpu;

TEST(MetaParity, Elementwise) {
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return mul(add(x[0], x[1]), exp(x[0])); }, {{{8, 16}}, {{16}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return div(pow(x[0], 2.0), x[1]); },
                               {{{8, 16}, DType::f32, true, 0.5, 1.5}, {{8, 1}, DType::f32, true, 0.5, 1.5}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return where(gt(x[1], 0.0), x[0], x[1]); }, {{{4, 5}}, {{5}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return maximum(sigmoid(x[0]), tanh(x[1])); }, {{{4, 5}}, {{4, 5}}}));
}

TEST(MetaParity, ReduceAndViews) {
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return sum(x[0].transpose(0, 1), {1}); }, {{{6, 7, 3}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return mean(x[0], {0, 2}, true); }, {{{6, 7, 3}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return max(x[0], 1).values; }, {{{6, 7, 3}}}));
  EXPECT_TRUE(meta_matches_cpu(
      [](auto& x) {
        auto p = split(x[0], {2, 5}, 1);
        return cat({p[1], mul(p[0], 2.0)}, 1);
      },
      {{{6, 7, 3}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return x[0].permute({2, 0, 1}).reshape({3, -1}); }, {{{6, 7, 3}}}));
  EXPECT_TRUE(meta_matches_cpu(
      [](auto& x) {
        return stack({x[0].narrow(0, 1, 2), x[0].select(0, 0).unsqueeze(0).expand({2, -1, -1})}, 0);
      },
      {{{6, 7, 3}}}));
}

TEST(MetaParity, MatmulLinearDropout) {
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return matmul(x[0], x[1].mT()); }, {{{2, 8, 16}}, {{2, 12, 16}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return linear(x[0].transpose(0, 1), x[1], x[2]); },
                               {{{5, 4, 16}}, {{12, 16}}, {{12}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return dropout(x[0], 0.3); }, {{{5, 4, 16}}}));
  EXPECT_TRUE(meta_matches_cpu(  // a piece of a (5, 9, 16) tensor, strided input: the contiguous copy too
      [](auto& x) {
        return dropout_rows(x[0].transpose(0, 1), 0.3, reserve_row_frame(5, 9, 16, {8, 0, 3, 4}));
      },
      {{{4, 5, 16}}}));
  EXPECT_TRUE(meta_matches_cpu([](auto& x) { return matmul(x[0].to(DType::bf16), x[1].to(DType::bf16)); },
                               {{{8, 16}}, {{16, 4}}}));
}

}  // namespace tidal

namespace tidal {
TEST(MetaParity, HarnessCatchesADifference) {
  // A function that allocates one more temporary on cpu than on meta must be reported.
  EXPECT_FALSE(
      meta_matches_cpu([](auto& x) { return x[0].is_meta() ? mul(x[0], 2.0) : mul(mul(x[0], 2.0), 1.0); }, {{{8, 8}}}));
}
}  // namespace tidal

namespace tidal {
TEST(EmptyTensors, ElementwiseOpsVisitNothing) {
  Tensor z = zeros({0});
  EXPECT_EQ(z.numel(), 0);
  Tensor e = zeros({3, 0, 2});
  EXPECT_EQ(add(e, e).shape(), (Shape{3, 0, 2}));
  EXPECT_EQ(e.transpose(0, 2).contiguous().shape(), (Shape{2, 0, 3}));
  EXPECT_EQ(sum(e).item<float>(), 0.0f);
}
}  // namespace tidal
