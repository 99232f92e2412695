#include "tidal/ops/reduce.h"
#include "tests/support/gradcheck.h"
#include "tidal/base/threads.h"
#include "tidal/ops/elementwise.h"

namespace tidal {
using testing::gradcheck;
using testing::uniform;

TEST(GradcheckReduce, SumAndMean) {
  Tensor a = uniform({2, 3, 4}, 1);
  EXPECT_TRUE(gradcheck([](auto& x) { return sum(x[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return sum(x[0], {1}); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return sum(x[0], {0, 2}, true); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return sum(x[0], {-1}); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return mean(x[0]); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return mean(x[0], {0, 1}); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return mean(x[0].transpose(0, 2), {1}, true); }, {a}));
}

TEST(GradcheckReduce, Max) {
  Tensor a = uniform({3, 5, 2}, 2);
  EXPECT_TRUE(gradcheck([](auto& x) { return max(x[0], 1).values; }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return max(x[0], -1, true).values; }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return max(x[0]); }, {a}));
}

TEST(GradcheckReduce, SumTo) {
  Tensor a = uniform({2, 3, 4}, 3);
  EXPECT_TRUE(gradcheck([](auto& x) { return sum_to(x[0], Shape{3, 1}); }, {a}));
  EXPECT_TRUE(gradcheck([](auto& x) { return sum_to(x[0], Shape{4}); }, {a}));
}

TEST(Reduce, ValuesAndDeterminism) {
  Tensor a = from_vector({1, 5, 3, 4, 2, 6}, Shape{2, 3});
  EXPECT_EQ(sum(a, {0}).to_vector<double>(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(sum(a, {1}).to_vector<double>(), (std::vector<double>{9, 12}));
  EXPECT_EQ(mean(a).item<double>(), 3.5);
  MaxResult m = max(a, 1);
  EXPECT_EQ(m.values.to_vector<double>(), (std::vector<double>{5, 6}));
  EXPECT_EQ(m.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 2}));
  // A long row is summed in fixed chunks: the result is the same for any thread count.
  Tensor big = uniform({1 << 20}, 4, -1, 1, false, DType::f32);
  const float s2 = sum(big).item<float>();
  const int saved = num_threads();
  set_num_threads(1);
  const float s1 = sum(big).item<float>();
  set_num_threads(saved);
  EXPECT_EQ(s1, s2);
}

}  // namespace tidal
