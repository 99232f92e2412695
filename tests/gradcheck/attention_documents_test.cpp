// Packed documents (AttentionOptions::documents, Megatron's --reset-attention-mask): query i of sample b
// sees only keys of its own document, in the eager softmax and the flash kernel, with gradients, GQA,
// sliding windows, key offsets (context parallelism's blocks), dropout and bf16; and RoPE at per-token
// positions (rope_tables_at, --reset-position-ids).
#include <algorithm>
#include <cmath>
#include <vector>

#include "tests/support/attention_grads.h"
#include "tests/support/gradcheck.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/documents.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/rope.h"
#include "tidal/ops/view.h"

namespace tidal {
using testing::all_close;
using testing::attention_grads;
using testing::bitwise_equal;
using testing::gradcheck;
using testing::Qkv;
using testing::uniform;

namespace {

constexpr AttentionKernel kKernels[] = {AttentionKernel::eager, AttentionKernel::flash};
constexpr int64_t kEod = 0;

// Token ids (B, T) i64 whose EOD tokens (id 0) sit at `eods[b]`: the documents of each row.
Tensor ids_with_eods(int64_t t, const std::vector<std::vector<int64_t>>& eods) {
  std::vector<int64_t> ids(eods.size() * size_t(t), 5);
  for (size_t b = 0; b < eods.size(); ++b)
    for (int64_t i : eods[b]) ids[b * size_t(t) + size_t(i)] = kEod;
  return from_vector_i64(ids, {int64_t(eods.size()), t});
}

Tensor i32(const std::vector<int32_t>& values, const Shape& shape) {
  Tensor t = empty(shape, DType::i32);
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

AttentionOptions packed(AttentionKernel kernel, const Tensor& starts, int64_t window = 0, double dropout_p = 0) {
  AttentionOptions o;
  o.kernel = kernel;
  o.documents = starts;
  o.window = window;
  o.dropout_p = dropout_p;
  return o;
}

// softmax(scale q k^T + mask) v from basic ops, with the causal, window and document rules in the
// bottom-right frame (key j is at key_offset + j); rows that see no key are zeros.
Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& starts, int64_t window,
                 int64_t key_offset = 0) {
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t hkv = k.size(1), s = k.size(2), dv = v.size(3), g = hq / hkv;
  Tensor kr = k.unsqueeze(2).expand({b, hkv, g, s, d}).reshape({b, hq, s, d});    // (B, Hq, S, D)
  Tensor vr = v.unsqueeze(2).expand({b, hkv, g, s, dv}).reshape({b, hq, s, dv});  // (B, Hq, S, Dv)
  Tensor scores = mul(matmul(q, kr.mT()), 1.0 / std::sqrt(double(d)));            // (B, Hq, T, S)
  const std::vector<int32_t> st = starts.contiguous().to_vector<int32_t>();
  std::vector<double> hidden(size_t(b * t * s), 0.0), seen(size_t(b * t), 0.0);
  for (int64_t r = 0; r < b; ++r)
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < s; ++j) {
        const int64_t diag = i + s - t;
        const bool visible = j <= diag && (window == 0 || j > diag - window) && key_offset + j >= st[size_t(r * t + i)];
        hidden[size_t((r * t + i) * s + j)] = visible ? 0.0 : 1.0;
        if (visible) seen[size_t(r * t + i)] = 1.0;
      }
  const Tensor mask = gt(from_vector(hidden, {b, 1, t, s}, q.dtype()), 0.5);  // (B, 1, T, S)
  scores = masked_fill(scores, mask, -1e300);
  Tensor e = exp(sub(scores, max(scores, -1, true).values));
  e = masked_fill(e, mask, 0.0);
  Tensor p = div(e, add(sum(e, {-1}, true), 1e-300));
  return mul(matmul(p, vr), from_vector(seen, {b, 1, t, 1}, q.dtype()));  // (B, Hq, T, Dv)
}

Qkv make_qkv(int64_t b, int64_t hq, int64_t hkv, int64_t t, int64_t s, int64_t d, DType dtype, uint64_t seed) {
  return {uniform({b, hq, t, d}, seed, -1, 1, true, dtype), uniform({b, hkv, s, d}, seed + 1, -1, 1, true, dtype),
          uniform({b, hkv, s, d}, seed + 2, -1, 1, true, dtype)};
}

}  // namespace

TEST(DocumentLayout, MegatronsRule) {
  // A new document starts after each EOD; the EOD belongs to the document it ends.
  const DocumentLayout l = document_layout(ids_with_eods(7, {{2, 3}, {}, {6}}), kEod);
  EXPECT_EQ(l.starts.to_vector<int32_t>(),
            (std::vector<int32_t>{0, 0, 0, 3, 4, 4, 4, /**/ 0, 0, 0, 0, 0, 0, 0, /**/ 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(l.positions.to_vector<int32_t>(),
            (std::vector<int32_t>{0, 1, 2, 0, 0, 1, 2, /**/ 0, 1, 2, 3, 4, 5, 6, /**/ 0, 1, 2, 3, 4, 5, 6}));
  const DocumentLayout mine = document_layout(ids_with_eods(7, {{2, 3}, {}, {6}}), kEod, {1, 3, 5});
  EXPECT_EQ(mine.starts.to_vector<int32_t>(), (std::vector<int32_t>{0, 3, 4, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(mine.positions.to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 1, 1, 3, 5, 1, 3, 5}));
}

TEST(DocumentLayout, NeatPackSampleIndices) {
  // MindSpeed's --neat-pack: each token's sample index (0: padding); a document is a run of one index.
  const Tensor samples = from_vector_i64({1, 1, 1, 2, 2, 3, 0, 0, /**/ 1, 1, 1, 1, 1, 1, 1, 1}, {2, 8});
  const DocumentLayout l = sample_document_layout(samples);
  EXPECT_EQ(l.starts.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 3, 3, 5, 6, 6, /**/ 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(l.positions.to_vector<int32_t>(),
            (std::vector<int32_t>{0, 1, 2, 0, 1, 0, 0, 1, /**/ 0, 1, 2, 3, 4, 5, 6, 7}));
  // Context-parallel rows keep the global starts, as document_layout's do.
  const DocumentLayout mine = sample_document_layout(samples, {2, 3, 7});
  EXPECT_EQ(mine.starts.to_vector<int32_t>(), (std::vector<int32_t>{0, 3, 6, 0, 0, 0}));
  EXPECT_EQ(mine.positions.to_vector<int32_t>(), (std::vector<int32_t>{2, 0, 1, 2, 3, 7}));
}

TEST(GradcheckAttentionDocuments, EagerAndFlashWithGqaAndWindows) {
  const Tensor starts = document_layout(ids_with_eods(9, {{3}, {0, 5, 6}}), kEod).starts;  // (2, 9)
  for (AttentionKernel kernel : kKernels)
    for (int64_t w : {int64_t(0), int64_t(2)}) {
      SCOPED_TRACE(::testing::Message() << name(kernel) << " W " << w);
      Qkv x = make_qkv(2, 4, 2, 9, 9, 3, DType::f64, 300 + uint64_t(w));
      const AttentionOptions opt = packed(kernel, starts, w);
      EXPECT_TRUE(
          gradcheck([&](auto& a) { return scaled_dot_product_attention(a[0], a[1], a[2], opt); }, {x.q, x.k, x.v}));
      const Tensor out = scaled_dot_product_attention(x.q, x.k, x.v, opt);
      EXPECT_TRUE(all_close(out, reference(x.q, x.k, x.v, starts, w), 1e-12, 1e-12));
    }
}

TEST(AttentionDocuments, PackedEqualsEachDocumentAlone) {
  // One row holding documents [0, 4), [4, 11), [11, 12), [12, 20): each document's rows of the packed
  // output and gradients equal those of the document run alone (causal, whole sequence).
  const Tensor starts = document_layout(ids_with_eods(20, {{3, 10, 11}}), kEod).starts;
  const int64_t bounds[] = {0, 4, 11, 12, 20};
  for (AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(name(kernel));
    Qkv x = make_qkv(1, 4, 2, 20, 20, 8, DType::f64, 320);
    const Tensor g = uniform({1, 4, 20, 8}, 323, -1, 1, false);
    const std::vector<Tensor> whole = attention_grads(x, g, packed(kernel, starts), get_rng_state());
    for (int n = 0; n < 4; ++n) {
      const int64_t a = bounds[n], len = bounds[n + 1] - a;
      Qkv part{x.q.detach().narrow(2, a, len).contiguous().set_requires_grad(true),
               x.k.detach().narrow(2, a, len).contiguous().set_requires_grad(true),
               x.v.detach().narrow(2, a, len).contiguous().set_requires_grad(true)};
      AttentionOptions alone;
      alone.kernel = kernel;
      const std::vector<Tensor> p = attention_grads(part, g.narrow(2, a, len), alone, get_rng_state());
      for (size_t i = 0; i < 4; ++i)
        EXPECT_TRUE(all_close(whole[i].narrow(2, a, len), p[i], 1e-12, 1e-12)) << "document " << n << " tensor " << i;
    }
  }
}

TEST(AttentionDocuments, KeyOffsetPlacesTheKeys) {
  // Queries at global rows [6, 10) against keys at global [2, 10): key j of the call is global 2 + j,
  // and the documents' starts are global (one row starts at 5, the other at 0).
  const Tensor starts = i32({5, 5, 5, 5, 0, 0, 8, 8}, {2, 4});
  for (AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(name(kernel));
    Qkv x = make_qkv(2, 2, 1, 4, 8, 4, DType::f64, 330);
    AttentionOptions opt = packed(kernel, starts);
    opt.key_offset = 2;
    EXPECT_TRUE(
        gradcheck([&](auto& a) { return scaled_dot_product_attention(a[0], a[1], a[2], opt); }, {x.q, x.k, x.v}));
    EXPECT_TRUE(all_close(scaled_dot_product_attention(x.q, x.k, x.v, opt), reference(x.q, x.k, x.v, starts, 0, 2),
                          1e-12, 1e-12));
  }
}

TEST(AttentionDocuments, FlashMatchesEagerWithDropoutOverManyTiles) {
  // Several query and key tiles, documents shorter and longer than a tile (one of length 1), with and
  // without a window; dropout draws the same Philox positions in both kernels.
  const Tensor starts = document_layout(ids_with_eods(300, {{0, 70, 71, 200}, {150}}), kEod).starts;
  for (int64_t w : {int64_t(0), int64_t(90)})
    for (double p : {0.0, 0.15}) {
      SCOPED_TRACE(::testing::Message() << "W " << w << " dropout " << p);
      Qkv x = make_qkv(2, 2, 1, 300, 300, 8, DType::f64, 340);
      const Tensor g = uniform({2, 2, 300, 8}, 343);
      manual_seed(5);
      const RngState st = get_rng_state();
      const std::vector<Tensor> eager = attention_grads(x, g, packed(AttentionKernel::eager, starts, w, p), st);
      const std::vector<Tensor> flash = attention_grads(x, g, packed(AttentionKernel::flash, starts, w, p), st);
      for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(all_close(flash[i], eager[i], 1e-10, 1e-12));
      if (p == 0) {
        EXPECT_TRUE(all_close(eager[0], reference(x.q, x.k, x.v, starts, w), 1e-10, 1e-12));
      }
    }
}

TEST(AttentionDocuments, OneDocumentIsPlainCausalBitForBit) {
  const Tensor starts = document_layout(ids_with_eods(40, {{39}, {}}), kEod).starts;  // all zeros
  for (AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(name(kernel));
    Qkv x = make_qkv(2, 4, 2, 40, 40, 8, DType::f32, 350);
    const Tensor g = uniform({2, 4, 40, 8}, 353, -1, 1, false, DType::f32);
    manual_seed(3);
    const RngState st = get_rng_state();
    AttentionOptions plain;
    plain.kernel = kernel;
    plain.dropout_p = 0.1;
    const std::vector<Tensor> a = attention_grads(x, g, plain, st);
    const std::vector<Tensor> b = attention_grads(x, g, packed(kernel, starts, 0, 0.1), st);
    for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i]));
  }
}

TEST(AttentionDocuments, BF16FlashMatchesEager) {
  const Tensor starts = document_layout(ids_with_eods(150, {{20, 99}}), kEod).starts;
  Qkv x = make_qkv(1, 4, 2, 150, 150, 16, DType::bf16, 360);
  const Tensor ref = reference(x.q.to(DType::f64), x.k.to(DType::f64), x.v.to(DType::f64), starts, 0);
  for (AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(name(kernel));
    const Tensor out = scaled_dot_product_attention(x.q, x.k, x.v, packed(kernel, starts));
    EXPECT_EQ(out.dtype(), DType::bf16);
    EXPECT_TRUE(all_close(out.to(DType::f64), ref, 2e-2, 2e-2));
  }
}

TEST(GradcheckAttentionDocuments, ScaledMaskedSoftmax) {
  const Tensor starts = i32({0, 0, 2, 2, 2, 5}, {1, 6});
  Tensor x = uniform({1, 2, 6, 6}, 370, -2, 2);  // (B, H, T, S)
  EXPECT_TRUE(gradcheck([&](auto& t) { return scaled_masked_softmax(t[0], 0.8, true, 0, starts); }, {x}));
  const std::vector<double> p = scaled_masked_softmax(x, 1.0, true, 0, starts).to_vector<double>();
  const int32_t st[] = {0, 0, 2, 2, 2, 5};
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < 6; ++i)
      for (int64_t j = 0; j < 6; ++j)
        EXPECT_EQ(p[size_t((h * 6 + i) * 6 + j)] > 0, j <= i && j >= st[i]) << "row " << i << " key " << j;
}

TEST(AttentionDocuments, BadDocumentsThrow) {
  const Tensor q = zeros({2, 2, 4, 8});
  for (AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(name(kernel));
    EXPECT_THROW(scaled_dot_product_attention(q, q, q, packed(kernel, zeros({2, 3}, DType::i32))), Error);  // shape
    EXPECT_THROW(scaled_dot_product_attention(q, q, q, packed(kernel, zeros({2, 4}, DType::i64))), Error);  // dtype
    AttentionOptions negative = packed(kernel, zeros({2, 4}, DType::i32));
    negative.key_offset = -1;
    EXPECT_THROW(scaled_dot_product_attention(q, q, q, negative), Error);
  }
}

TEST(GradcheckRope, TablesAtPositions) {
  // Per-sample positions: each sample's rotation equals the plain one at those positions.
  const RopeTables whole = rope_tables(9, 6, 100.0, DType::f64);
  const DocumentLayout l = document_layout(ids_with_eods(9, {{2, 6}, {}}), kEod);
  const RopeTables at = rope_tables_at(whole, l.positions);  // (2, 9, 6)
  EXPECT_EQ(at.cos.shape(), (Shape{2, 9, 6}));
  Tensor x = uniform({2, 3, 9, 6}, 380);
  EXPECT_TRUE(gradcheck([&](auto& t) { return apply_rope(t[0], at.cos, at.sin); }, {x}));
  Tensor xt = uniform({2, 9, 3, 6}, 381);  // (B, T, H, D): the projection layout
  EXPECT_TRUE(gradcheck([&](auto& t) { return apply_rope(t[0].transpose(1, 2), at.cos, at.sin); }, {xt}));
  const Tensor y = apply_rope(x, at.cos, at.sin);
  // Row 0's third document (tokens 7, 8) sits at positions 0, 1: the plain tables' first two rows.
  const Tensor doc = x.narrow(0, 0, 1).narrow(2, 7, 2);
  const RopeTables first = rope_tables(2, 6, 100.0, DType::f64);
  EXPECT_TRUE(all_close(y.narrow(0, 0, 1).narrow(2, 7, 2), apply_rope(doc.contiguous(), first.cos, first.sin), 0, 0));
  // Row 1 is one document: the plain rotation bit for bit.
  EXPECT_TRUE(bitwise_equal(y.narrow(0, 1, 1), apply_rope(x.narrow(0, 1, 1).contiguous(), whole.cos, whole.sin)));
  EXPECT_THROW(rope_tables_at(whole, i32({9}, {1, 1})), Error);                        // beyond the table
  EXPECT_THROW(apply_rope(x, at.cos.narrow(0, 0, 1), at.sin.narrow(0, 0, 1)), Error);  // B mismatch
}

}  // namespace tidal
