// The CUDA softmax, log_softmax and the eager attention's scaled masked softmax against the CPU
// backend, forward and backward.
#include <gtest/gtest.h>

#include "tests/cuda/compare_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/softmax.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

using testing::expect_close;
using testing::kFloatTypes;
using testing::on_cuda;
using testing::random_cpu;
using testing::tolerance;

TEST(CudaSoftmax, SoftmaxAndLogSoftmaxOverEachDimMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  const Shape shapes[] = {{1}, {7}, {4097}, {3, 1000}, {5, 7, 9}, {2, 33, 3}};
  uint64_t seed = 7;
  for (DType dt : kFloatTypes)
    for (const Shape& s : shapes)
      for (int64_t d = 0; d < s.size(); ++d)
        for (bool log : {false, true}) {
          Tensor x = random_cpu(s, dt, seed++);
          Tensor xg = on_cuda(x);
          x.set_requires_grad(true);
          xg.set_requires_grad(true);
          Tensor c = log ? log_softmax(x, d) : softmax(x, d);
          Tensor g = log ? log_softmax(xg, d) : softmax(xg, d);
          expect_close(g, c, tolerance(dt), log ? "log_softmax" : "softmax");
          const Tensor grad = random_cpu(s, dt, seed++);
          c.backward(grad);
          g.backward(on_cuda(grad));
          expect_close(xg.grad(), x.grad(), tolerance(dt) * 5, log ? "log_softmax backward" : "softmax backward");
        }
}

// Causal (bottom-right) and not, and sliding windows (AttentionOptions::window): W = 1, inside and
// across rows, T != S, rows that see no key, a window longer than the keys.
TEST(CudaSoftmax, ScaledMaskedSoftmaxMatchesTheCpuCausalBottomRight) {
  TIDAL_REQUIRE_CUDA();
  struct Case {
    Shape shape;
    bool causal;
    int64_t window = 0;
  };
  const Case cases[] = {{{1, 1, 1, 1}, true},        {{2, 3, 7, 7}, true},      {{2, 3, 5, 9}, true},
                        {{1, 2, 9, 5}, true},        {{1, 2, 17, 1000}, false}, {{1, 1, 4, 4097}, true},
                        {{2, 1, 33, 300}, true},     {{2, 3, 7, 7}, true, 1},   {{2, 3, 9, 9}, true, 3},
                        {{2, 3, 5, 9}, true, 4},     {{1, 2, 9, 5}, true, 2},   {{1, 1, 33, 4097}, true, 100},
                        {{2, 1, 33, 300}, true, 500}};
  uint64_t seed = 300;
  for (DType dt : kFloatTypes)
    for (const Case& k : cases) {
      Tensor x = random_cpu(k.shape, dt, seed++);
      Tensor xg = on_cuda(x);
      x.set_requires_grad(true);
      xg.set_requires_grad(true);
      Tensor c = scaled_masked_softmax(x, 0.37, k.causal, k.window);
      Tensor g = scaled_masked_softmax(xg, 0.37, k.causal, k.window);
      expect_close(g, c, tolerance(dt), "scaled_masked_softmax");
      const Tensor grad = random_cpu(k.shape, dt, seed++);
      c.backward(grad);
      g.backward(on_cuda(grad));
      expect_close(xg.grad(), x.grad(), tolerance(dt) * 5, "scaled_masked_softmax backward");
    }
}

}  // namespace
}  // namespace tidal
