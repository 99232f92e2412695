// The CUDA Sinkhorn-Knopp projection (DeepSeek-V4's mHC residual mapping, ops/sinkhorn.h) against the CPU backend,
// forward and backward: hc_mult 4 with DeepSeek-V4's 20 iterations, one iteration, 1 x 1 and odd n, n = 32 (the
// largest a block takes), and iterations whose backward needs more than 48 KiB of shared memory (f64). Every
// operation is rounded as the CPU rounds it, so f32 and f64 agree bit for bit; bf16 to its rounding.
#include <gtest/gtest.h>

#include "tests/cuda/compare_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tidal/ops/sinkhorn.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

using testing::expect_close;
using testing::kFloatTypes;
using testing::on_cuda;
using testing::random_values;
using testing::same_bits;
using testing::tolerance;

TEST(CudaSinkhorn, ForwardAndBackwardMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  struct Case {
    Shape shape;
    int64_t iters;
    double eps;
  };
  const Case cases[] = {{{2, 37, 4, 4}, 20, 1e-6}, {{3, 4, 4}, 1, 0.0},    {{5, 1, 1}, 3, 1e-3},
                        {{3, 7, 7}, 5, 1e-6},      {{2, 32, 32}, 4, 1e-6}, {{100, 4, 4}, 200, 1e-6}};
  uint64_t seed = 11;
  for (DType dt : kFloatTypes)
    for (const Case& c : cases) {
      SCOPED_TRACE(::testing::Message() << c.shape << " iters " << c.iters << " eps " << c.eps << " " << dt);
      Tensor x = from_vector(random_values(c.shape.numel(), seed++, 0.05, 3.0), c.shape, dt);  // positive entries
      Tensor xg = on_cuda(x);
      x.set_requires_grad(true);
      xg.set_requires_grad(true);
      const Tensor y = sinkhorn(x, c.iters, c.eps), yg = sinkhorn(xg, c.iters, c.eps);
      expect_close(yg, y, tolerance(dt), "sinkhorn");
      const Tensor g = from_vector(random_values(c.shape.numel(), seed++), c.shape, dt);
      y.backward(g);
      yg.backward(on_cuda(g));
      expect_close(xg.grad(), x.grad(), tolerance(dt) * 5, "sinkhorn backward");
      if (dt != DType::bf16) {
        EXPECT_TRUE(same_bits(yg, y)) << "forward bits";
        EXPECT_TRUE(same_bits(xg.grad(), x.grad())) << "backward bits";
      }
    }
}

// The op's usual input: a (B, T, n, n) slice of a larger tensor, made contiguous by the op; the same bits twice.
TEST(CudaSinkhorn, ANonContiguousInputAndRepeatedRunsGiveTheSameBits) {
  TIDAL_REQUIRE_CUDA();
  const Shape shape{2, 9, 4, 8};
  Tensor x = on_cuda(from_vector(random_values(shape.numel(), 5, 0.05, 3.0), shape, DType::f32)).narrow(3, 2, 4);
  Tensor cpu = from_vector(x.to_vector<double>(), x.shape(), DType::f32);
  const Tensor a = sinkhorn(x, 20, 1e-6), b = sinkhorn(x, 20, 1e-6);
  EXPECT_TRUE(same_bits(a, b));
  EXPECT_TRUE(same_bits(a, sinkhorn(cpu, 20, 1e-6)));
}

}  // namespace
}  // namespace tidal
