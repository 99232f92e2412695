#include "tidal/ops/sinkhorn.h"
#include "tests/support/gradcheck.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"

namespace tidal {
using testing::all_close;
using testing::gradcheck;
using testing::uniform;

namespace {

// transformers' DeepseekV4HyperConnection loop, from existing ops (autograd through every step).
Tensor sinkhorn_reference(const Tensor& x, int64_t iters, double eps) {
  Tensor c = div(x, add(sum(x, {-2}, true), eps));
  for (int64_t i = 0; i + 1 < iters; ++i) {
    c = div(c, add(sum(c, {-1}, true), eps));
    c = div(c, add(sum(c, {-2}, true), eps));
  }
  return c;
}

}  // namespace

TEST(GradcheckSinkhorn, IterationsAndShapes) {
  for (int64_t iters : {1, 2, 5, 20}) {
    SCOPED_TRACE(::testing::Message() << "iters " << iters);
    Tensor x = uniform({2, 3, 4, 4}, 7, 0.05, 1.0);
    EXPECT_TRUE(gradcheck([&](auto& in) { return sinkhorn(in[0], iters, 1e-6); }, {x}));
    EXPECT_TRUE(gradcheck([&](auto& in) { return sinkhorn(in[0], iters, 0.1); }, {uniform({3, 3}, 8, 0.05, 1.0)}));
  }
  // A strided input (the transpose of each matrix) goes through the op's contiguous copy.
  EXPECT_TRUE(gradcheck([](auto& in) { return sinkhorn(in[0].transpose(-1, -2), 4, 1e-6); },
                        {uniform({5, 2, 2}, 9, 0.05, 1.0)}));
}

TEST(Sinkhorn, MatchesTheIterationsComposedFromOps) {
  Tensor x = uniform({3, 7, 4, 4}, 11, 0.01, 2.0, false);
  for (int64_t iters : {1, 3, 20}) {
    SCOPED_TRACE(::testing::Message() << "iters " << iters);
    Tensor ref = sinkhorn_reference(x, iters, 1e-6);
    EXPECT_TRUE(all_close(sinkhorn(x, iters, 1e-6), ref, 1e-13, 1e-15));
    EXPECT_TRUE(all_close(sinkhorn(x.to(DType::f32), iters, 1e-6).to(DType::f64), ref, 1e-5, 1e-6));
    // The gradient against autograd through the composed ops, f64 and f32.
    Tensor w = uniform(x.shape(), 12, -1.0, 1.0, false);
    Tensor xr = x.detach().set_requires_grad(true);
    sum(mul(sinkhorn_reference(xr, iters, 1e-6), w)).backward();
    for (DType dt : {DType::f64, DType::f32}) {
      Tensor xi = x.detach().to(dt).set_requires_grad(true);
      sum(mul(sinkhorn(xi, iters, 1e-6).to(DType::f64), w)).backward();
      const double tol = dt == DType::f64 ? 1e-11 : 1e-4;
      EXPECT_TRUE(all_close(xi.grad().to(DType::f64), xr.grad(), tol, tol)) << dt;
    }
  }
}

TEST(Sinkhorn, ManyIterationsGiveDoublyStochasticMatrices) {
  Tensor y = sinkhorn(uniform({6, 4, 4}, 13, 0.1, 1.0, false), 50, 0.0);
  EXPECT_TRUE(all_close(sum(y, {-1}), add(mul(sum(y, {-1}), 0.0), 1.0), 1e-9, 1e-9));
  EXPECT_TRUE(all_close(sum(y, {-2}), add(mul(sum(y, {-2}), 0.0), 1.0), 1e-12, 1e-12));
}

TEST(Sinkhorn, RefusesWhatItCannotProject) {
  EXPECT_THROW(sinkhorn(uniform({3, 4}, 1, 0.1, 1.0, false), 3, 1e-6), Error);
  EXPECT_THROW(sinkhorn(uniform({4, 4}, 1, 0.1, 1.0, false), 0, 1e-6), Error);
  EXPECT_THROW(sinkhorn(uniform({4, 4}, 1, 0.1, 1.0, false), 3, -1.0), Error);
}

}  // namespace tidal
