// The CUDA attention over per-query kept keys (ops/sparse_attention.h sparse_attention_with_lse, DeepSeek-V4's
// compressed sparse attention) against the CPU backend: out, lse and the gradients of q, keys and values through
// both outputs, with -1 slots, a row with no key kept (out 0, lse -inf), keys kept twice in a row and by many rows,
// GQA and MQA, more slots than a block has warps, head dims past one warp's lanes, transposed views, keys and
// values one tensor (DeepSeek-V4's shared entries); f32, bf16 and f64. The backward is deterministic: the same
// bits twice.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/cuda/compare_util.h"
#include "tests/cuda/cuda_test_util.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/sparse_attention.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

using testing::expect_close_to_scale;
using testing::heads_leaf;
using testing::kFloatTypes;
using testing::LeafView;
using testing::on_cuda;
using testing::random_values;
using testing::same_bits;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Case {
  int64_t b, hq, hkv, t, w, k, d, dv;
  bool shared_kv = false;  // keys and values one tensor (then dv == d)
};

// kept (B, T, k): random keys of [0, W) with about one slot in four empty, row 0 of sample 0 keeping none, row 1
// keeping one key twice.
Tensor make_kept(const Case& c, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> key(0, int32_t(c.w) - 1);
  std::uniform_int_distribution<int> empty_slot(0, 3);
  Tensor kept = empty({c.b, c.t, c.k}, DType::i32);
  int32_t* p = kept.data<int32_t>();
  for (int64_t r = 0; r < c.b * c.t; ++r)
    for (int64_t j = 0; j < c.k; ++j) p[r * c.k + j] = empty_slot(gen) == 0 ? -1 : key(gen);
  for (int64_t j = 0; j < c.k; ++j) p[j] = -1;
  if (c.t > 1 && c.k > 1) p[c.k] = p[c.k + 1] = int32_t(c.w - 1);
  return kept;
}

// The outputs of one side: out, lse and the three gradients (dv undefined when keys and values are one tensor).
struct Side {
  Tensor out, lse, dq, dk, dv;
};
Side run(const Case& c, DType dtype, Device device, const Tensor& kept_cpu) {
  const LeafView q = heads_leaf(c.b, c.hq, c.t, c.d, dtype, 1, device),
                 keys = heads_leaf(c.b, c.hkv, c.w, c.d, dtype, 2, device);
  const LeafView values = c.shared_kv ? keys : heads_leaf(c.b, c.hkv, c.w, c.dv, dtype, 3, device);
  const Tensor kept = device.is_cuda() ? on_cuda(kept_cpu) : kept_cpu;
  const AttentionWithLse r = sparse_attention_with_lse(q.view, keys.view, values.view, kept);
  // Both outputs reach the loss: the lse's gradient enters the backward's delta (finite stand-ins for -inf rows).
  const Tensor lse = masked_fill(r.lse, eq(r.lse, -kInf), 0.0);
  const Tensor loss = add(r.out, mul(lse.unsqueeze(-1), 0.7));
  const Tensor g = from_vector(random_values(loss.numel(), 9, -1.0, 1.0), loss.shape(), dtype, device);
  loss.backward(g);
  return {r.out, r.lse, q.leaf.grad(), keys.leaf.grad(), c.shared_kv ? Tensor() : values.leaf.grad()};
}

void check(const Case& c, DType dtype) {
  SCOPED_TRACE(::testing::Message() << "B " << c.b << " Hq " << c.hq << " Hkv " << c.hkv << " T " << c.t << " W " << c.w
                                    << " k " << c.k << " D " << c.d << " Dv " << c.dv << " shared " << c.shared_kv
                                    << " " << dtype);
  const Tensor kept = make_kept(c, 77 + uint64_t(c.k));
  const Side cpu = run(c, dtype, Device::cpu(), kept), gpu = run(c, dtype, Device::cuda(0), kept);
  const double tol = testing::attention_tolerance(dtype);
  expect_close_to_scale(gpu.out, cpu.out, tol, "out");
  expect_close_to_scale(gpu.lse, cpu.lse, tol, "lse");
  EXPECT_EQ(gpu.lse.to_vector<double>()[0], -kInf) << "row 0 keeps no key";
  expect_close_to_scale(gpu.dq, cpu.dq, tol, "dq");
  expect_close_to_scale(gpu.dk, cpu.dk, tol, "dk");
  if (!c.shared_kv) expect_close_to_scale(gpu.dv, cpu.dv, tol, "dv");
}

TEST(CudaSparseAttention, ForwardAndBackwardMatchTheCpu) {
  TIDAL_REQUIRE_CUDA();
  const Case cases[] = {
      {2, 4, 2, 9, 7, 5, 16, 8},      // GQA, k below the block's warps
      {2, 4, 4, 6, 5, 3, 3, 2},       // the gradcheck's tiny shape, MHA
      {1, 8, 1, 17, 30, 40, 96, 80},  // MQA (DeepSeek-V4's one entry head), k and D past a warp
      {2, 4, 1, 12, 9, 6, 64, 64, true}, {1, 2, 1, 5, 3, 1, 8, 8},  // one slot per row
  };
  for (DType dt : kFloatTypes)
    for (const Case& c : cases) check(c, dt);
}

// The per-key sums run in the inverted index's order, whatever the launch: two backward runs give the same bits.
TEST(CudaSparseAttention, BackwardIsDeterministic) {
  TIDAL_REQUIRE_CUDA();
  const Case c{2, 8, 1, 64, 20, 16, 64, 64};  // every key read by many rows
  const Tensor kept = make_kept(c, 5);
  const Side a = run(c, DType::f32, Device::cuda(0), kept), b = run(c, DType::f32, Device::cuda(0), kept);
  EXPECT_TRUE(same_bits(a.out, b.out));
  EXPECT_TRUE(same_bits(a.dq, b.dq));
  EXPECT_TRUE(same_bits(a.dk, b.dk));
  EXPECT_TRUE(same_bits(a.dv, b.dv));
}

}  // namespace
}  // namespace tidal
