// The fused attention's operation graphs (cudnn_sdpa_graph.h).
//
// Note [cuDNN's fused attention graphs]: cuDNN has no single "attention" operation that takes a causal
// mask; its fused flash-attention engines match a graph of elementary operations instead, and build
// one kernel for it. The forward is
//   S = Q Kᵀ · scale, masked (causal: S[i, j] = -inf where j > i), M = rowmax S, E = exp(S - M),
//   Z = rowsum E, stats = M + log Z, O = (E / Z) V
// with K given transposed (its last two dims and strides swapped) and E / Z in bf16 for the second
// product. The backward recomputes P = exp(S - stats) and forms
//   sum = rowsum(dO ∘ O), dV = Pᵀ dO, dS = P ∘ (dO Vᵀ - sum) · scale, dK = dSᵀ Q, dQ = dS K,
// with V given transposed too and, for grouped-query attention, dK and dV formed per query head and
// reduced over each group. dQ is written by its product: the deterministic form (the accumulating one
// adds float partial products in arrival order).
#include "tidal/backend/cuda/cudnn_sdpa_graph.h"

namespace tidal::cuda::cudnn {
namespace {

constexpr cudnnDataType_t kF32 = CUDNN_DATA_FLOAT;
constexpr cudnnDataType_t kBf16 = CUDNN_DATA_BFLOAT16;

Dims swap23(const Dims& x) { return {x[0], x[1], x[3], x[2]}; }

// x with -inf where the key (axis 3) comes after the query (axis 2).
const GraphTensor& causal_mask(Graph& g, const GraphTensor& x) {
  const GraphTensor& row = g.virt(CUDNN_DATA_INT32, x.dims);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, row, kF32, 2);
  const GraphTensor& col = g.virt(CUDNN_DATA_INT32, x.dims);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, col, kF32, 3);
  const GraphTensor& keep = g.virt(CUDNN_DATA_BOOLEAN, x.dims);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, &col, nullptr, keep, CUDNN_DATA_BOOLEAN);
  const GraphTensor& neg_inf = g.scalar(kSdpaNegInf, kF32);
  const GraphTensor& y = g.virt(kF32, x.dims);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, &neg_inf, &keep, y);  // keep ? x : -inf
  return y;
}

// scale * Q Kᵀ, masked: the (B, Hq, T, S) scores in f32.
const GraphTensor& scores(Graph& g, const SdpaShape& s, const GraphTensor& q, const GraphTensor& kt,
                          const GraphTensor& scale) {
  const GraphTensor& qk = g.virt(kF32, {s.b, s.hq, s.t, s.s});
  g.matmul(q, kt, qk);
  const GraphTensor& scaled = g.binary(CUDNN_POINTWISE_MUL, qk, scale);
  return s.causal ? causal_mask(g, scaled) : scaled;
}

// A (B, Hq, S, D) product reduced to the (B, Hk, S, D) gradient `out` over each group of heads (or
// written straight into it when every key head has one query head).
void per_key_head(Graph& g, const SdpaShape& s, const GraphTensor& a, const GraphTensor& b, const GraphTensor& out) {
  if (s.hq == s.hk) {
    g.matmul(a, b, out);
    return;
  }
  const GraphTensor& full = g.virt(kBf16, {s.b, s.hq, s.s, s.d});
  g.matmul(a, b, full);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, full, out);
}

// x's (B, H, A, C) elements seen as (B, H, C, A), in bf16 (a product's operand).
const GraphTensor& transposed(Graph& g, const GraphTensor& x) {
  const GraphTensor& y = g.virt(kBf16, swap23(x.dims), swap23(x.strides));
  g.reshape(x, y);
  return y;
}

}  // namespace

std::vector<int64_t> SdpaShape::key(bool backward) const {
  std::vector<int64_t> k_ = {backward ? 1 : 0, b, hq, hk, t, s, d, causal ? 1 : 0};
  for (const Dims* x : {&q, &k, &v, &o}) k_.insert(k_.end(), x->begin(), x->end());
  if (backward)
    for (const Dims* x : {&dout, &dq, &dk, &dv}) k_.insert(k_.end(), x->begin(), x->end());
  return k_;
}

Graph sdpa_forward_graph(const SdpaShape& s) {
  Graph g;
  const Dims rows{s.b, s.hq, s.t, 1};
  const GraphTensor& q = g.io(kSdpaQ, kBf16, {s.b, s.hq, s.t, s.d}, s.q);
  const GraphTensor& kt = g.io(kSdpaK, kBf16, {s.b, s.hk, s.d, s.s}, swap23(s.k));
  const GraphTensor& v = g.io(kSdpaV, kBf16, {s.b, s.hk, s.s, s.d}, s.v);
  const GraphTensor& o = g.io(kSdpaO, kBf16, {s.b, s.hq, s.t, s.d}, s.o);
  const GraphTensor& stats = g.io(kSdpaStats, kF32, rows, contiguous_strides(rows));
  const GraphTensor& scale = g.scalar(kSdpaScale, kF32);
  const GraphTensor& x = scores(g, s, q, kt, scale);
  const GraphTensor& m = g.virt(kF32, rows);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, x, m);
  const GraphTensor& e = g.unary(CUDNN_POINTWISE_EXP, g.binary(CUDNN_POINTWISE_SUB, x, m));
  const GraphTensor& z = g.virt(kF32, rows);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  const GraphTensor& log_z = g.unary(CUDNN_POINTWISE_LOG, z);
  g.pointwise(CUDNN_POINTWISE_ADD, m, &log_z, nullptr, stats);
  const GraphTensor& p = g.virt(kBf16, x.dims);  // the second product's operand, in the inputs' type
  g.pointwise(CUDNN_POINTWISE_DIV, e, &z, nullptr, p);
  g.matmul(p, v, o);
  return g;
}

Graph sdpa_backward_graph(const SdpaShape& s) {
  Graph g;
  const Dims rows{s.b, s.hq, s.t, 1}, qd{s.b, s.hq, s.t, s.d}, kd{s.b, s.hk, s.s, s.d};
  const GraphTensor& q = g.io(kSdpaQ, kBf16, qd, s.q);
  const GraphTensor& kt = g.io(kSdpaK, kBf16, swap23(kd), swap23(s.k));
  const GraphTensor& vt = g.io(kSdpaV, kBf16, swap23(kd), swap23(s.v));
  const GraphTensor& o = g.io(kSdpaO, kBf16, qd, s.o);
  const GraphTensor& dout = g.io(kSdpaDout, kBf16, qd, s.dout);
  const GraphTensor& stats = g.io(kSdpaStats, kF32, rows, contiguous_strides(rows));
  const GraphTensor& dq = g.io(kSdpaDq, kBf16, qd, s.dq);
  const GraphTensor& dk = g.io(kSdpaDk, kBf16, kd, s.dk);
  const GraphTensor& dv = g.io(kSdpaDv, kBf16, kd, s.dv);
  const GraphTensor& scale = g.scalar(kSdpaScale, kF32);
  const GraphTensor& one = g.scalar(kSdpaOne, kF32);

  // sum = rowsum(dO ∘ O), kept in the workspace for the whole kernel.
  const GraphTensor& row_dot = g.virt(kF32, rows);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, g.binary(CUDNN_POINTWISE_MUL, dout, o), row_dot);
  const GraphTensor& sum = g.io(kSdpaSoftmaxSum, kF32, rows, contiguous_strides(rows));
  g.pointwise(CUDNN_POINTWISE_MUL, row_dot, &one, nullptr, sum);

  // P = exp(S - stats); dV = Pᵀ dO.
  const GraphTensor& x = scores(g, s, q, kt, scale);
  const GraphTensor& p = g.unary(CUDNN_POINTWISE_EXP, g.binary(CUDNN_POINTWISE_SUB, x, stats));
  per_key_head(g, s, transposed(g, p), dout, dv);

  // dS = P ∘ (dO Vᵀ - sum) · scale; dK = dSᵀ Q; dQ = dS K.
  const GraphTensor& dp = g.virt(kF32, x.dims);
  g.matmul(dout, vt, dp);
  const GraphTensor& ds =
      g.binary(CUDNN_POINTWISE_MUL, g.binary(CUDNN_POINTWISE_MUL, g.binary(CUDNN_POINTWISE_SUB, dp, sum), p), scale);
  per_key_head(g, s, transposed(g, ds), q, dk);
  const GraphTensor& k = g.virt(kBf16, kd, s.k);
  g.reshape(kt, k);
  g.matmul(ds, k, dq);
  return g;
}

}  // namespace tidal::cuda::cudnn
