#include "tidal/ops/view.h"
#include "tests/support/gradcheck.h"
#include "tidal/ops/elementwise.h"

namespace tidal {
using testing::gradcheck;
using testing::uniform;

TEST(GradcheckView, ReshapeTransposePermute) {
  Tensor a = uniform({2, 3, 4}, 1);
  EXPECT_TRUE(gradcheck([](auto& x) { return x[0].view(Shape{6, 4}); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return x[0].transpose(0, 2).reshape(Shape{4, -1}); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return x[0].permute({2, 0, 1}); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return x[0].unsqueeze(1).squeeze(1).flatten(1); }, {a}));
}

TEST(GradcheckView, NarrowSelectExpand) {
  Tensor a = uniform({3, 5}, 2);
  EXPECT_TRUE(gradcheck([](auto& x) { return x[0].narrow(1, 1, 3); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return x[0].select(0, -1); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return x[0].unsqueeze(0).expand(Shape{2, -1, -1}); }, {a}));
  Tensor b = uniform({3, 1}, 3);
  EXPECT_TRUE(gradcheck([](auto& x) { return x[0].expand(Shape{2, 3, 4}); }, {b}));
}

TEST(GradcheckView, SplitCatStack) {
  Tensor a = uniform({4, 6}, 4), b = uniform({4, 2}, 5);
  EXPECT_TRUE(gradcheck([](auto& x) { return split(x[0], {1, 2, 3}, 1)[2]; }, {a}));
  // Only some pieces used: the others get zero gradient.
  EXPECT_TRUE(gradcheck(
      [](auto& x) {
        auto p = chunk(x[0], 3, 1);
        return mul(p[0], p[2]);
      },
      {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return cat({x[0], x[1], x[0]}, 1); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& x) { return stack({x[0], mul(x[0], 2.0)}, 1); }, {a}));
}

TEST(View, SharesStorageAndCopiesOnlyWhenNeeded) {
  Tensor a = arange(0, 24, 1, DType::f32).reshape(Shape{2, 3, 4});
  Tensor t = a.transpose(1, 2);
  EXPECT_TRUE(t.is_alias_of(a));
  EXPECT_FALSE(t.is_contiguous());
  Tensor c = t.contiguous();
  EXPECT_FALSE(c.is_alias_of(a));
  EXPECT_TRUE(c.contiguous().is_alias_of(c));
  EXPECT_EQ(t.select(1, 1).to_vector<float>(), (std::vector<float>{1, 5, 9, 13, 17, 21}));
  EXPECT_TRUE(a.narrow(2, 1, 2).is_alias_of(a));
  EXPECT_TRUE(a.reshape(Shape{6, 4}).is_alias_of(a));
  EXPECT_FALSE(t.reshape(Shape{-1}).is_alias_of(a));  // a transposed tensor cannot be flattened in place
  EXPECT_THROW(t.view(Shape{-1}), Error);
  EXPECT_EQ(cat({a, a}, 0).shape(), (Shape{4, 3, 4}));
  auto parts = split(a, {1, 3}, 2);
  EXPECT_EQ(parts[1].shape(), (Shape{2, 3, 3}));
  EXPECT_TRUE(parts[1].is_alias_of(a));
}

}  // namespace tidal
