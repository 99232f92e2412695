// The CUDA layer norm and RMS norm against the CPU backend, forward and backward, and the backward's
// determinism (two runs, the same bits).
#include <gtest/gtest.h>

#include "tests/cuda/compare_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tidal/ops/norm.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

using testing::expect_close;
using testing::kFloatTypes;
using testing::on_cuda;
using testing::random_cpu;
using testing::same_bits;
using testing::tolerance;

struct Grads {
  Tensor out, dx, dw, db;
};

// layer_norm (rms = false) or rms_norm of (rows, cols) with parameters, and its gradients for `grad`.
Grads run(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& grad, bool rms) {
  Tensor x = x0.detach(), w = w0.detach(), b = b0.detach();
  x.set_requires_grad(true);
  w.set_requires_grad(true);
  b.set_requires_grad(true);
  Tensor out = rms ? rms_norm(x, w, 1e-6) : layer_norm(x, w, b, 1e-5);
  out.backward(grad);
  return {out, x.grad(), w.grad(), rms ? Tensor() : b.grad()};
}

TEST(CudaNorm, LayerNormAndRmsNormMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  const Shape shapes[] = {{1, 1}, {7, 5}, {3, 1000}, {1000, 7}, {2, 3, 4097}, {600, 64}};
  uint64_t seed = 11;
  for (DType dt : kFloatTypes)
    for (const Shape& s : shapes)
      for (bool rms : {false, true}) {
        const Shape p{s[s.size() - 1]};
        const Tensor x = random_cpu(s, dt, seed++), w = random_cpu(p, dt, seed++), b = random_cpu(p, dt, seed++);
        const Tensor grad = random_cpu(s, dt, seed++);
        const Grads c = run(x, w, b, grad, rms);
        const Grads g = run(on_cuda(x), on_cuda(w), on_cuda(b), on_cuda(grad), rms);
        const double tol = tolerance(dt);
        expect_close(g.out, c.out, tol * 2, "norm out");
        expect_close(g.dx, c.dx, tol * 20, "norm dx");
        expect_close(g.dw, c.dw, tol * 50, "norm dweight");
        if (!rms) expect_close(g.db, c.db, tol * 50, "norm dbias");
      }
}

// Gemma's RMSNorm (weight offset 1) forward and backward against the CPU.
TEST(CudaNorm, RmsNormWithWeightOffsetMatchesTheCpu) {
  TIDAL_REQUIRE_CUDA();
  uint64_t seed = 91;
  for (DType dt : kFloatTypes)
    for (const Shape& s : {Shape{7, 5}, Shape{600, 256}, Shape{2, 3, 4097}}) {
      const Tensor x0 = random_cpu(s, dt, seed++), w0 = random_cpu({s[s.size() - 1]}, dt, seed++);
      const Tensor grad = random_cpu(s, dt, seed++);
      Grads got[2];
      for (int k = 0; k < 2; ++k) {
        Tensor x = (k ? on_cuda(x0) : x0).detach().set_requires_grad(true);
        Tensor w = (k ? on_cuda(w0) : w0).detach().set_requires_grad(true);
        Tensor out = rms_norm(x, w, 1e-6, 1.0);
        out.backward(k ? on_cuda(grad) : grad);
        got[k] = {out, x.grad(), w.grad(), Tensor()};
      }
      const double tol = tolerance(dt);
      expect_close(got[1].out, got[0].out, tol * 2, "gemma rms_norm out");
      expect_close(got[1].dx, got[0].dx, tol * 20, "gemma rms_norm dx");
      expect_close(got[1].dw, got[0].dw, tol * 50, "gemma rms_norm dweight");
    }
}

TEST(CudaNorm, NormsWithoutParametersMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    const Tensor x = random_cpu({37, 129}, dt, 5);
    expect_close(layer_norm(on_cuda(x)), layer_norm(x), tolerance(dt) * 2, "layer_norm no params");
    expect_close(rms_norm(on_cuda(x)), rms_norm(x), tolerance(dt) * 2, "rms_norm no params");
  }
}

TEST(CudaNorm, BackwardIsBitwiseDeterministic) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloatTypes)
    for (bool rms : {false, true}) {
      const Shape s{4100, 257};
      const Tensor x = on_cuda(random_cpu(s, dt, 21)), grad = on_cuda(random_cpu(s, dt, 22));
      const Tensor w = on_cuda(random_cpu({257}, dt, 23)), b = on_cuda(random_cpu({257}, dt, 24));
      const Grads a = run(x, w, b, grad, rms), c = run(x, w, b, grad, rms);
      EXPECT_TRUE(same_bits(a.dx, c.dx));
      EXPECT_TRUE(same_bits(a.dw, c.dw));
      if (!rms) {
        EXPECT_TRUE(same_bits(a.db, c.db));
      }
    }
}

}  // namespace
}  // namespace tidal
