// The CUDA RoPE (tables and rotation, forward and backward) and embedding (lookup and its
// deterministic backward) against the CPU backend.
#include <gtest/gtest.h>

#include <random>

#include "tests/cuda/compare_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tidal/ops/embedding.h"
#include "tidal/ops/rope.h"
#include "tidal/ops/view.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

using testing::expect_close;
using testing::expect_equal;
using testing::kFloatTypes;
using testing::on_cuda;
using testing::random_cpu;
using testing::same_bits;
using testing::tolerance;

TEST(CudaRope, TablesAreTheCpuBits) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloatTypes)
    for (int64_t offset : {int64_t(0), int64_t(4093)}) {
      const RopeTables c = rope_tables(257, 64, 10000.0, dt, Device::cpu(), offset);
      const RopeTables g = rope_tables(257, 64, 10000.0, dt, Device::cuda(0), offset);
      EXPECT_TRUE(testing::same_bits(g.cos, c.cos));
      EXPECT_TRUE(testing::same_bits(g.sin, c.sin));
    }
}

// apply_rope of x (B, H, T, D) and its backward on both devices; strided: x stored (B, T, H, D) and
// viewed (B, H, T, D), as attention's q/k are (reading those back needs the cuda copy kernel).
void rope_cases(bool strided) {
  const Shape shapes[] = {{1, 1, 1, 2}, {2, 3, 7, 8}, {1, 2, 33, 128}};
  uint64_t seed = 40;
  for (DType dt : kFloatTypes)
    for (const Shape& s : shapes) {
      {
        const RopeTables tc = rope_tables(s[2], s[3], 500000.0, dt, Device::cpu(), 3);
        const RopeTables tg = rope_tables(s[2], s[3], 500000.0, dt, Device::cuda(0), 3);
        const Shape stored = strided ? Shape{s[0], s[2], s[1], s[3]} : s;
        Tensor xc = random_cpu(stored, dt, seed++);
        Tensor xg = on_cuda(xc);
        xc.set_requires_grad(true);
        xg.set_requires_grad(true);
        const Tensor vc = strided ? transpose(xc, 1, 2) : xc, vg = strided ? transpose(xg, 1, 2) : xg;
        Tensor c = apply_rope(vc, tc.cos, tc.sin), g = apply_rope(vg, tg.cos, tg.sin);
        expect_close(g.contiguous(), c.contiguous(), tolerance(dt), "apply_rope");
        const Tensor grad = random_cpu(c.shape(), dt, seed++);
        c.backward(grad);
        g.backward(on_cuda(grad));
        expect_close(xg.grad().contiguous(), xc.grad().contiguous(), tolerance(dt), "apply_rope backward");
      }
    }
}

TEST(CudaRope, ApplyRopeAndItsBackwardMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  rope_cases(false);
}

TEST(CudaRope, ApplyRopeOnStridedViewsMatchesTheCpu) {
  TIDAL_REQUIRE_CUDA();
  rope_cases(true);
}

Tensor random_ids(int64_t n, int64_t vocab, DType dt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = double(rng() % uint64_t(vocab / 3 + 1));  // repeats: rows hit several times
  return from_vector(v, {n}, dt);
}

TEST(CudaEmbedding, ForwardAndBackwardMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  struct Case {
    int64_t vocab, cols, n;
  };
  const Case cases[] = {{1, 1, 1}, {7, 5, 20}, {1000, 7, 4097}, {50, 1000, 300}, {4097, 3, 10}};
  uint64_t seed = 60;
  for (DType dt : kFloatTypes)
    for (DType it : {DType::i32, DType::i64})
      for (const Case& k : cases) {
        const Tensor ids = random_ids(k.n, k.vocab, it, seed++);
        Tensor wc = random_cpu({k.vocab, k.cols}, dt, seed++);
        Tensor wg = on_cuda(wc);
        wc.set_requires_grad(true);
        wg.set_requires_grad(true);
        Tensor c = embedding(wc, ids), g = embedding(wg, on_cuda(ids));
        expect_equal(g, c, "embedding");
        const Tensor grad = random_cpu(c.shape(), dt, seed++);
        c.backward(grad);
        g.backward(on_cuda(grad));
        expect_close(wg.grad(), wc.grad(), tolerance(dt), "embedding backward");
      }
}

TEST(CudaEmbedding, ForwardReadsAStridedWeight) {
  TIDAL_REQUIRE_CUDA();
  const Tensor w = random_cpu({9, 6}, DType::f32, 3);
  const Tensor ids = random_ids(11, 6, DType::i64, 4);
  // The weight transposed: (6, 9) with strides (1, 6).
  expect_equal(embedding(transpose(on_cuda(w), 0, 1), on_cuda(ids)), embedding(transpose(w, 0, 1), ids),
               "strided weight");
}

TEST(CudaEmbedding, BackwardIsBitwiseDeterministic) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    const Tensor ids = on_cuda(random_ids(20000, 30, DType::i64, 8));  // ~2000 hits per row
    const Tensor grad = on_cuda(random_cpu({20000, 129}, dt, 9));
    Tensor grads[2];
    for (Tensor& out : grads) {
      Tensor w = on_cuda(random_cpu({30, 129}, dt, 10));
      w.set_requires_grad(true);
      embedding(w, ids).backward(grad);
      out = w.grad();
    }
    EXPECT_TRUE(same_bits(grads[0], grads[1]));
  }
}

}  // namespace
}  // namespace tidal
