// attention_with_lse (ops/attention.h) on CUDA against the CPU backend, both outputs in the loss so the log-sum-exp's
// gradient enters the backward (FlashArgs::lse_grad): DeepSeek-V4's compressed keys (key_rate; rows that see no
// key: lse +inf, out 0), its sliding window, plain causal attention in bf16 with head dim 64 and T == S (a forward
// cuDNN's fused kernel takes, a backward it must not: the eager path's), GQA; f32, bf16 and f64.
// tests/cuda/backend/cuda/attention_test.cpp checks the kernels themselves and that cuDNN refuses both.
#include <gtest/gtest.h>

#include <limits>

#include "tests/cuda/compare_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/elementwise.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

using testing::expect_close_to_scale;
using testing::heads_leaf;
using testing::kFloatTypes;
using testing::LeafView;
using testing::random_values;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  int64_t b, hq, hkv, t, s, d;
  int64_t window = 0, key_rate = 0;
};

struct Side {
  Tensor out, lse, dq, dk, dv;
};
Side run(const Case& c, DType dtype, Device device) {
  const LeafView q = heads_leaf(c.b, c.hq, c.t, c.d, dtype, 1, device),
                 k = heads_leaf(c.b, c.hkv, c.s, c.d, dtype, 2, device);
  const LeafView v = heads_leaf(c.b, c.hkv, c.s, c.d, dtype, 3, device);
  AttentionOptions opt;
  opt.window = c.window;
  opt.key_rate = c.key_rate;
  const AttentionWithLse r = attention_with_lse(q.view, k.view, v.view, opt);
  const Tensor lse = masked_fill(r.lse, eq(r.lse, kInf), 0.0);  // rows that see no key: a finite stand-in
  const Tensor loss = add(r.out, mul(lse.unsqueeze(-1), 0.7));
  loss.backward(from_vector(random_values(loss.numel(), 9, -1.0, 1.0), loss.shape(), dtype, device));
  return {r.out, r.lse, q.leaf.grad(), k.leaf.grad(), v.leaf.grad()};
}

void check(const Case& c, DType dtype) {
  SCOPED_TRACE(::testing::Message() << "B " << c.b << " Hq " << c.hq << " Hkv " << c.hkv << " T " << c.t << " S " << c.s
                                    << " D " << c.d << " window " << c.window << " key_rate " << c.key_rate << " "
                                    << dtype);
  const Side cpu = run(c, dtype, Device::cpu()), gpu = run(c, dtype, Device::cuda(0));
  const double tol = testing::attention_tolerance(dtype);
  expect_close_to_scale(gpu.out, cpu.out, tol, "out");
  expect_close_to_scale(gpu.lse, cpu.lse, tol, "lse");
  expect_close_to_scale(gpu.dq, cpu.dq, tol, "dq");
  expect_close_to_scale(gpu.dk, cpu.dk, tol, "dk");
  expect_close_to_scale(gpu.dv, cpu.dv, tol, "dv");
}

TEST(CudaAttentionWithLse, CompressedKeysMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    check({2, 4, 1, 24, 6, 16, 0, 4}, dt);   // E = T / R entries; rows 0..2 see none
    check({1, 4, 2, 21, 9, 32, 0, 3}, dt);   // GQA, T not a multiple of R
    check({1, 2, 1, 16, 10, 16, 0, 4}, dt);  // more entries than any row sees (the last 6 never)
  }
  // bf16 with T == S and head dim 64: cuDNN's shape, refused for the compressed keys.
  check({1, 4, 4, 64, 64, 64, 0, 1}, DType::bf16);
}

TEST(CudaAttentionWithLse, AUsedLogSumExpMatchesTheCpu) {
  TIDAL_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    check({2, 4, 2, 33, 33, 16}, dt);     // causal, GQA
    check({2, 4, 1, 33, 33, 16, 5}, dt);  // DeepSeek-V4's sliding window
  }
  check({2, 4, 2, 128, 128, 64}, DType::bf16);  // cuDNN's forward, the eager backward with the lse's gradient
}

}  // namespace
}  // namespace tidal
