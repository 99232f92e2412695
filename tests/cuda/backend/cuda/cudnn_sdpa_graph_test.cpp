// The fused attention's cuDNN graphs, built without a GPU: every tensor and operation descriptor of
// the forward and backward graphs is finalized by cuDNN itself (which checks ranks, strides, types
// and each operation's operands), for the layouts tidal hands the kernels. Runs in CI; what needs a
// GPU (the operation graph, engines, plans, results) is tests/cuda/attention_test.cpp's.
#include <gtest/gtest.h>

#include "tidal/backend/cuda/cudnn_sdpa_graph.h"

namespace tidal::cuda::cudnn {
namespace {

// (B, H, L, D) strides of a (B, L, H, D) buffer: how tidal lays out q, k, v, out and their gradients.
Dims bthd(int64_t h, int64_t l, int64_t d) { return {l * h * d, d, h * d, 1}; }

SdpaShape shape(int64_t b, int64_t hq, int64_t hk, int64_t t, int64_t d, bool causal) {
  SdpaShape s;
  s.b = b;
  s.hq = hq;
  s.hk = hk;
  s.t = t;
  s.s = t;
  s.d = d;
  s.causal = causal;
  s.q = s.o = s.dout = s.dq = bthd(hq, t, d);
  s.k = s.v = s.dk = s.dv = bthd(hk, t, d);
  return s;
}

// Operations in the forward: QKᵀ, scale, [row index, column index, compare, select], max, sub, exp,
// sum, log, add (stats), div, PV.
TEST(CudnnSdpaGraph, ForwardDescriptorsFinalize) {
  for (bool causal : {false, true}) {
    const Graph g = sdpa_forward_graph(shape(2, 8, 8, 128, 64, causal));
    EXPECT_EQ(g.ops().size(), causal ? 14u : 10u) << "causal " << causal;
  }
  const Graph gqa = sdpa_forward_graph(shape(1, 16, 4, 100, 128, true));  // GQA, T not a multiple of 64
  EXPECT_EQ(gqa.ops().size(), 14u);
}

// Operations in the backward: dO∘O, its row sum, ·1 (into the workspace), QKᵀ, scale, [mask: 4], sub,
// exp, Pᵀ, PᵀdO [, head sum], dOVᵀ, sub, mul, scale, dSᵀ, dSᵀQ [, head sum], Kᵀ→K, dS K.
TEST(CudnnSdpaGraph, BackwardDescriptorsFinalize) {
  EXPECT_EQ(sdpa_backward_graph(shape(2, 8, 8, 128, 64, false)).ops().size(), 17u);
  EXPECT_EQ(sdpa_backward_graph(shape(2, 8, 8, 128, 64, true)).ops().size(), 21u);
  EXPECT_EQ(sdpa_backward_graph(shape(1, 16, 4, 100, 128, true)).ops().size(), 23u);  // GQA: two head sums
}

TEST(CudnnSdpaGraph, KeysSeparateLayoutsAndDirections) {
  const SdpaShape a = shape(2, 8, 8, 128, 64, true);
  SdpaShape b = a;
  b.o = {8 * 128 * 64, 128 * 64, 64, 1};  // out (B, H, T, D) contiguous instead
  EXPECT_NE(a.key(false), b.key(false));
  EXPECT_NE(a.key(false), a.key(true));
  SdpaShape c = a;
  c.dq = b.o;  // the forward does not depend on the backward's strides
  EXPECT_EQ(a.key(false), c.key(false));
  EXPECT_NE(a.key(true), c.key(true));
}

// cuDNN checks each operation's operands: a product whose inner dims differ is a tidal error naming it.
TEST(CudnnSdpaGraph, RefusedOperationIsAnError) {
  Graph g;
  const GraphTensor& a = g.io(1, CUDNN_DATA_BFLOAT16, {1, 1, 4, 8}, contiguous_strides({1, 1, 4, 8}));
  const GraphTensor& b = g.io(2, CUDNN_DATA_BFLOAT16, {1, 1, 16, 4}, contiguous_strides({1, 1, 16, 4}));
  const GraphTensor& c = g.virt(CUDNN_DATA_FLOAT, {1, 1, 4, 4});
  try {
    g.matmul(a, b, c);
    FAIL() << "a (4, 8) x (16, 4) product was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("matmul into tensor"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tidal::cuda::cudnn
