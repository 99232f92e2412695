// The strided elementwise loop splits the flat range across threads: every element is visited
// exactly once whatever the layout and the split points.
#include <gtest/gtest.h>

#include "tests/support/gradcheck.h"
#include "tidal/base/threads.h"
#include "tidal/ops/elementwise.h"

namespace tidal {

TEST(Loops, EveryElementOnceForAnyLayoutAndThreadCount) {
  // Sizes chosen so that runs are cut mid-row at the thread split points.
  Tensor a = arange(0, 37 * 1001, 1, DType::f32).reshape({37, 1001});
  Tensor b = arange(0, 1001 * 37, 1, DType::f32).reshape({1001, 37}).t();  // (37, 1001), strided
  Tensor bias = arange(0, 1001, 1, DType::f32);
  const int saved = num_threads();
  std::vector<Tensor> results;
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    results.push_back(add(add(a, b), bias));
    results.push_back(exp(mul(a.t().contiguous(), 1e-5)));
  }
  set_num_threads(saved);
  std::vector<float> v = results[0].to_vector<float>();
  for (int64_t i = 0; i < 37; ++i)
    for (int64_t j = 0; j < 1001; ++j)
      ASSERT_EQ(v[size_t(i * 1001 + j)], float(i * 1001 + j) + float(j * 37 + i) + float(j)) << i << "," << j;
  for (size_t r = 2; r < results.size(); ++r) EXPECT_TRUE(testing::bitwise_equal(results[r], results[r % 2]));
}

}  // namespace tidal

namespace tidal {
TEST(Loops, TiledTransposeCopyForEveryItemSize) {
  for (DType dt : {DType::u8, DType::bf16, DType::f32, DType::i64}) {
    Tensor a = arange(0, 3 * 45 * 70, 1, DType::i64).reshape({3, 45, 70});
    if (dt == DType::u8) a = a.to(DType::f32);
    Tensor src = (dt == DType::u8 ? a.to(DType::i64) : a).to(dt);
    Tensor t = src.permute({0, 2, 1}).contiguous();  // (3, 70, 45)
    std::vector<double> v = t.to_vector<double>();
    std::vector<double> s = src.to_vector<double>();
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t i = 0; i < 70; ++i)
        for (int64_t j = 0; j < 45; ++j)
          ASSERT_EQ(v[size_t((b * 70 + i) * 45 + j)], s[size_t((b * 45 + j) * 70 + i)]) << dtype_name(dt);
  }
}
}  // namespace tidal
