#include "tidal/ops/matmul.h"
#include "tests/support/gradcheck.h"
#include "tidal/ops/random.h"

namespace tidal {
using testing::all_close;
using testing::gradcheck;
using testing::uniform;

TEST(GradcheckMatmul, AllTransposeCases) {
  Tensor a = uniform({3, 4}, 1), b = uniform({4, 5}, 2);
  Tensor at = uniform({4, 3}, 3), bt = uniform({5, 4}, 4);
  EXPECT_TRUE(gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& x) { return matmul(x[0].t(), x[1]); }, {at, b}));
  EXPECT_TRUE(gradcheck([](auto& x) { return matmul(x[0], x[1].t()); }, {a, bt}));
  EXPECT_TRUE(gradcheck([](auto& x) { return matmul(x[0].t(), x[1].t()); }, {at, bt}));
}

TEST(GradcheckMatmul, BatchedAndBroadcast) {
  Tensor a = uniform({2, 3, 4}, 5), b = uniform({2, 4, 5}, 6), w = uniform({4, 5}, 7);
  EXPECT_TRUE(gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {a, b}));
  EXPECT_TRUE(gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {a, w}));  // folded rows
  Tensor c = uniform({2, 1, 3, 4}, 8), d = uniform({3, 4, 2}, 9);
  EXPECT_TRUE(gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {c, d}));
  Tensor v = uniform({4}, 10);
  EXPECT_TRUE(gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {a, v}));
  EXPECT_TRUE(gradcheck([](auto& x) { return matmul(x[0], x[1]); }, {v, w}));
}

TEST(GradcheckMatmul, Linear) {
  Tensor x = uniform({2, 3, 4}, 11), w = uniform({5, 4}, 12), b = uniform({5}, 13);
  EXPECT_TRUE(gradcheck([](auto& t) { return linear(t[0], t[1], t[2]); }, {x, w, b}));
  EXPECT_TRUE(gradcheck([](auto& t) { return linear(t[0], t[1]); }, {x, w}));
  EXPECT_TRUE(gradcheck([](auto& t) { return linear(t[0].transpose(0, 1), t[1], t[2]); }, {x, w, b}));
  EXPECT_TRUE(gradcheck([](auto& t) { return linear(t[0], t[1], t[2]); }, {uniform({4}, 14), w, b}));
}

TEST(Matmul, F32MatchesF64Reference) {
  manual_seed(3);
  Tensor a = randn({2, 64, 96}), b = randn({96, 80});
  Tensor ref = matmul(a.to(DType::f64), b.to(DType::f64));
  EXPECT_TRUE(all_close(matmul(a, b), ref, 1e-4, 1e-4));
  EXPECT_TRUE(all_close(matmul(a.transpose(1, 2).contiguous().transpose(1, 2), b), ref, 1e-4, 1e-4));
  EXPECT_TRUE(all_close(matmul(a.to(DType::bf16), b.to(DType::bf16)).to(DType::f64), ref, 3e-2, 3e-1));
}

TEST(Matmul, BadShapesThrow) {
  EXPECT_THROW(matmul(zeros({2, 3}), zeros({4, 5})), Error);
  EXPECT_THROW(matmul(zeros({2, 3}), zeros({3, 5}, DType::f64)), Error);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 5})), Error);
  EXPECT_THROW(linear(zeros({2, 3}), zeros({4, 3}), zeros({5})), Error);
  EXPECT_THROW(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})), Error);
}

}  // namespace tidal
