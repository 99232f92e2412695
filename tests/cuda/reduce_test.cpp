// The CUDA reductions (sum, mean, max and its backward) against the CPU backend.
#include <gtest/gtest.h>

#include "tests/cuda/compare_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tidal/ops/reduce.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::kFloatTypes;
using testing::on_cuda;
using testing::random_cpu;
using testing::tolerance;

TEST(CudaReduce, SumAndMeanOverEachDimMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  const Shape shapes[] = {{1}, {7}, {4097}, {3, 1000}, {5, 7, 9}, {2, 4097, 3}, {1000, 1}};
  uint64_t seed = 1;
  for (DType dt : kFloatTypes)
    for (const Shape& s : shapes) {
      const Tensor x = random_cpu(s, dt, seed++);
      const Tensor xg = on_cuda(x);
      expect_close(sum(xg), sum(x), tolerance(dt) * 10, "sum all");
      for (int64_t d = 0; d < s.size(); ++d) {
        expect_close(sum(xg, {d}), sum(x, {d}), tolerance(dt) * 10, "sum dim");
        expect_close(mean(xg, {d}, true), mean(x, {d}, true), tolerance(dt) * 10, "mean dim");
      }
    }
}

TEST(CudaReduce, MaxValuesIndicesAndBackwardMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  const Shape shapes[] = {{1}, {7}, {4097}, {3, 1000}, {5, 7, 9}, {2, 300, 3}};
  uint64_t seed = 100;
  for (DType dt : kFloatTypes)
    for (const Shape& s : shapes)
      for (int64_t d = 0; d < s.size(); ++d) {
        Tensor x = random_cpu(s, dt, seed++);
        Tensor xg = on_cuda(x);
        x.set_requires_grad(true);
        xg.set_requires_grad(true);
        MaxResult c = max(x, d), g = max(xg, d);
        expect_equal(g.values, c.values, "max values");
        expect_equal(g.indices, c.indices, "max indices");
        const Tensor grad = random_cpu(c.values.shape(), dt, seed++);
        c.values.backward(grad);
        g.values.backward(on_cuda(grad));
        expect_equal(xg.grad(), x.grad(), "max backward");
      }
}

TEST(CudaReduce, MaxTiesAndNaNFollowTheCpuRule) {
  TIDAL_REQUIRE_CUDA();
  std::vector<double> v(3000, 1.0);
  v[17] = 5.0;
  v[2999] = 5.0;  // a tie: the first wins
  v[1500] = 0.0 / 0.0;
  v[2500] = 0.0 / 0.0;  // the first NaN wins
  for (DType dt : kFloatTypes) {
    const Tensor x = from_vector(v, {3, 1000}, dt);
    const Tensor xg = on_cuda(x);
    for (int64_t d = 0; d < 2; ++d) {
      MaxResult c = max(x, d), g = max(xg, d);
      expect_equal(g.indices, c.indices, "tie indices");
      expect_equal(g.values, c.values, "tie values");
    }
  }
}

}  // namespace
}  // namespace tidal
