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
