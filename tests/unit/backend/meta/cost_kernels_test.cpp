// The meta device's cost kernels (tidal/seam/cost.h, backend/meta/cost_kernels.cpp): exact FLOP and
// byte counts from shapes, off unless a sink is installed, and stand-ins that keep value-reading ops
// on their path.
#include "tidal/seam/cost.h"

#include <gtest/gtest.h>

#include <vector>

#include "tidal/ops/attention.h"
#include "tidal/ops/chunked_loss.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/reduce.h"
#include "tidal/seam/kernels.h"

namespace tidal {
namespace {

// Installs a sink that keeps every record, for the test's lifetime.
class Recording {
 public:
  Recording() {
    set_cost_sink([this](const KernelCost& c) { records.push_back(c); });
  }
  ~Recording() { set_cost_sink(nullptr); }
  int64_t flops(CostKind kind) const {
    int64_t f = 0;
    for (const KernelCost& c : records) f += c.kind == kind ? c.flops : 0;
    return f;
  }
  std::vector<KernelCost> records;
};

Tensor meta(const Shape& shape, DType dtype = DType::f32, bool grad = false) {
  Tensor t = empty(shape, dtype, Device::meta());
  if (grad) t.set_requires_grad(true);
  return t;
}

TEST(CostKernels, OffWithoutASink) {
  EXPECT_FALSE(cost_sink_installed());
  EXPECT_EQ(kernels_for(meta({2, 2})), nullptr);
  Recording r;
  EXPECT_EQ(kernels_for(meta({2, 2})), &device_kernels(Device::meta()));
  EXPECT_EQ(kernels_for(empty({2, 2}, DType::f32, Device::cpu())), &device_kernels(Device::cpu()));
}

TEST(CostKernels, MatmulIsTwoMNKPerBatch) {
  Recording r;
  matmul(meta({2, 3, 4, 5}), meta({5, 6}));  // batch 6, M 4, K 5, N 6
  ASSERT_EQ(r.records.size(), 1u);
  EXPECT_STREQ(r.records[0].kernel, "matmul");
  EXPECT_EQ(r.records[0].kind, CostKind::gemm);
  EXPECT_EQ(r.records[0].flops, 2 * 6 * 4 * 6 * 5);
  EXPECT_EQ(r.records[0].bytes, 4 * (2 * 3 * 4 * 5 + 5 * 6 + 2 * 3 * 4 * 6));
}

TEST(CostKernels, LinearForwardAndBackward) {
  Recording r;
  Tensor x = meta({8, 16}, DType::bf16, true), w = meta({32, 16}, DType::bf16, true);
  Tensor y = linear(x, w);
  EXPECT_EQ(r.flops(CostKind::gemm), 2 * 8 * 32 * 16);
  EXPECT_EQ(r.records.back().dtype, DType::bf16);
  sum(y).backward();
  EXPECT_EQ(r.flops(CostKind::gemm), 3 * 2 * 8 * 32 * 16);  // + dx = g w, + dw = g^T x
}

TEST(CostKernels, FlashAttentionCountsTheCpuTiles) {
  // T = S = 200, D = 16, 2 heads. Forward tiles 64 rows x 256 keys: causal query blocks see 64, 128,
  // 192 and 200 keys (the 8-row last block); Q K^T and P V each 2·rows·keys·D.
  const int64_t fwd_pairs = 64 * 64 + 64 * 128 + 64 * 192 + 8 * 200;
  EXPECT_EQ(flash_forward_flops(1, 2, 200, 200, 16, 16, true), 2 * 2 * fwd_pairs * (16 + 16));
  EXPECT_EQ(flash_forward_flops(1, 2, 200, 200, 16, 16, false), 4 * 2 * 200 * 200 * 16);  // 4·B·H·T·S·D
  // Backward tiles 64 rows x 128 keys: key tile 0 (128 keys) meets all 200 rows, key tile 1 (72 keys)
  // the rows from block 128 on; each pair 2·(2D + 2Dv + D) with dq; then rowsum(dO·O), 2·T·Dv.
  const int64_t bwd_per_head = 2 * 128 * 200 * 80 + 2 * 72 * 72 * 80 + 2 * 200 * 16;
  EXPECT_EQ(flash_backward_flops(1, 2, 200, 200, 16, 16, true, true), 2 * bwd_per_head);

  Recording r;
  Tensor q = meta({1, 2, 200, 16}, DType::f32, true), k = meta({1, 2, 200, 16}, DType::f32, true);
  Tensor v = meta({1, 2, 200, 16}, DType::f32, true);
  sum(scaled_dot_product_attention(q, k, v, {})).backward();
  EXPECT_EQ(r.flops(CostKind::attention), 2 * 2 * fwd_pairs * 32 + 2 * bwd_per_head);
}

TEST(CostKernels, FlashAttentionWithAWindowCountsTheVisibleTiles) {
  // T = S = 512, W = 64, D = Dv = 16, one head. Forward query blocks of 64 rows walk the keys from
  // their first row's window start to their last row's diagonal: 64 keys for block 0, 127 after.
  const int64_t fwd = 2 * 32 * 64 * (64 + 7 * 127);
  EXPECT_EQ(flash_forward_flops(1, 1, 512, 512, 16, 16, true, 64), fwd);
  EXPECT_LT(fwd * 2, flash_forward_flops(1, 1, 512, 512, 16, 16, true));  // O(T·W), not O(T²)
  // Backward key tiles of 128 keys are seen by rows [j0, j0 + 191): the query blocks of 64 rows from
  // j0 to j0 + 192 (the last tile to 512).
  const int64_t bwd = 2 * 128 * (192 + 192 + 192 + 128) * (2 * 16 + 2 * 16 + 16) + 2 * 512 * 16;
  EXPECT_EQ(flash_backward_flops(1, 1, 512, 512, 16, 16, true, true, 64), bwd);
  // A window as long as the keys is plain causal attention; the op hands the window to the kernels.
  EXPECT_EQ(flash_forward_flops(1, 1, 512, 512, 16, 16, true, 512), flash_forward_flops(1, 1, 512, 512, 16, 16, true));
  Recording r;
  Tensor q = meta({1, 1, 512, 16}, DType::f32, true), k = meta({1, 1, 512, 16}, DType::f32, true);
  Tensor v = meta({1, 1, 512, 16}, DType::f32, true);
  AttentionOptions opt;
  opt.window = 64;
  sum(scaled_dot_product_attention(q, k, v, opt)).backward();
  EXPECT_EQ(r.flops(CostKind::attention), fwd + bwd);
}

TEST(CostKernels, ChunkedLossCountsEachChunksGemms) {
  Recording r;
  const int64_t N = 10, C = 8, V = 50, chunk = 4;  // chunks of 4, 4, 2 rows
  Tensor h = meta({N, C}, DType::f32, true), w = meta({V, C}, DType::f32, true);
  chunked_lm_loss(h, w, empty({N}, DType::i64, Device::meta()), chunk).backward();
  int64_t gemms = 0;
  for (const KernelCost& c : r.records) gemms += c.kind == CostKind::gemm;
  EXPECT_EQ(gemms, 3 * 3);                                // logits, grad_hidden, grad_weight per chunk
  EXPECT_EQ(r.flops(CostKind::gemm), 3 * 2 * N * V * C);  // the three GEMMs over all rows
}

TEST(CostKernels, ValueReadingOpsTakeStandIns) {
  Recording r;
  Tensor logits = meta({6, 11}, DType::f32, true);
  Tensor loss = cross_entropy(logits, empty({6}, DType::i64, Device::meta()));  // find_bad_target: -1
  loss.backward();                                                              // the scale read as 0
  bool forward = false, backward = false;
  for (const KernelCost& c : r.records) {
    forward = forward || std::string(c.kernel) == "cross_entropy_forward";
    backward = backward || std::string(c.kernel) == "cross_entropy_backward";
  }
  EXPECT_TRUE(forward);
  EXPECT_TRUE(backward);
}

}  // namespace
}  // namespace tidal
