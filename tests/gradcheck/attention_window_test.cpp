// Sliding-window attention (AttentionOptions::window): query i sees keys i + S - T - W < j <= i + S - T,
// in the eager softmax and both flash kernels, with gradients, GQA, T != S, dropout and bf16.
#include <array>
#include <cmath>
#include <limits>

#include "tests/support/attention_grads.h"
#include "tests/support/gradcheck.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal {
using testing::all_close;
using testing::attention_grads;
using testing::bitwise_equal;
using testing::gradcheck;
using testing::Qkv;
using testing::uniform;

namespace {

constexpr AttentionKernel kKernels[] = {AttentionKernel::eager, AttentionKernel::flash};

AttentionOptions windowed(AttentionKernel kernel, int64_t window, double dropout_p = 0) {
  AttentionOptions o;
  o.kernel = kernel;
  o.window = window;
  o.dropout_p = dropout_p;
  return o;
}

// softmax(scale q k^T + window mask) v from basic ops (Hugging Face's sliding_window_overlay in the
// bottom-right frame), k/v heads repeated for GQA; rows that see no key are zeros.
Tensor reference_window(const Tensor& q, const Tensor& k, const Tensor& v, int64_t window) {
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t hkv = k.size(1), s = k.size(2), dv = v.size(3), g = hq / hkv;
  Tensor kr = k.unsqueeze(2).expand({b, hkv, g, s, d}).reshape({b, hq, s, d});    // (B, Hq, S, D)
  Tensor vr = v.unsqueeze(2).expand({b, hkv, g, s, dv}).reshape({b, hq, s, dv});  // (B, Hq, S, Dv)
  Tensor scores = mul(matmul(q, kr.mT()), 1.0 / std::sqrt(double(d)));            // (B, Hq, T, S)
  std::vector<double> hidden(size_t(t * s), 0.0), seen(size_t(t), 0.0);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < s; ++j) {
      const int64_t diag = i + s - t;
      const bool visible = j <= diag && j > diag - window;
      hidden[size_t(i * s + j)] = visible ? 0.0 : 1.0;
      if (visible) seen[size_t(i)] = 1.0;
    }
  const Tensor mask = gt(from_vector(hidden, {t, s}, q.dtype()), 0.5);  // (T, S)
  scores = masked_fill(scores, mask, -1e300);  // finite: rows without keys stay finite, then zeroed
  Tensor e = exp(sub(scores, max(scores, -1, true).values));
  e = masked_fill(e, mask, 0.0);
  Tensor p = div(e, add(sum(e, {-1}, true), 1e-300));               // rows without keys: 0 / tiny
  return mul(matmul(p, vr), from_vector(seen, {t, 1}, q.dtype()));  // (B, Hq, T, Dv)
}

Qkv make_qkv(int64_t hq, int64_t hkv, int64_t t, int64_t s, int64_t d, int64_t dv, DType dtype, uint64_t seed) {
  return {uniform({1, hq, t, d}, seed, -1, 1, true, dtype), uniform({1, hkv, s, d}, seed + 1, -1, 1, true, dtype),
          uniform({1, hkv, s, dv}, seed + 2, -1, 1, true, dtype)};
}

}  // namespace

TEST(GradcheckAttentionWindow, EagerAndFlashWithGqa) {
  // W = 1 (each query sees itself only), W = 3 over T = S = 9, and T != S bottom-right (T < S: a
  // query chunk after a cache; T > S: rows that see no key).
  struct Case {
    int64_t t, s, w;
  };
  for (AttentionKernel kernel : kKernels)
    for (Case c : {Case{9, 9, 1}, Case{9, 9, 3}, Case{4, 9, 3}, Case{9, 5, 2}}) {
      SCOPED_TRACE(::testing::Message() << name(kernel) << " T " << c.t << " S " << c.s << " W " << c.w);
      Qkv x = make_qkv(4, 2, c.t, c.s, 3, 4, DType::f64, 200 + uint64_t(c.w));
      const AttentionOptions opt = windowed(kernel, c.w);
      EXPECT_TRUE(
          gradcheck([&](auto& a) { return scaled_dot_product_attention(a[0], a[1], a[2], opt); }, {x.q, x.k, x.v}));
      const Tensor out = scaled_dot_product_attention(x.q, x.k, x.v, opt);
      EXPECT_TRUE(all_close(out, reference_window(x.q, x.k, x.v, c.w), 1e-12, 1e-12));
    }
}

TEST(GradcheckAttentionWindow, ScaledMaskedSoftmax) {
  Tensor x = uniform({2, 6, 8}, 240, -2, 2);
  EXPECT_TRUE(gradcheck([](auto& t) { return scaled_masked_softmax(t[0], 0.8, true, 3); }, {x}));
  const Tensor p = scaled_masked_softmax(x, 1.0, true, 2);  // (2, 6, 8): row i sees keys i + 1, i + 2
  const std::vector<double> v = p.to_vector<double>();
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < 8; ++j)
      EXPECT_EQ(v[size_t(i * 8 + j)] > 0, j == i + 2 || j == i + 1) << "row " << i << " key " << j;
}

TEST(AttentionWindow, AtLeastTheKeysIsPlainCausalBitForBit) {
  for (AttentionKernel kernel : kKernels)
    for (int64_t w : {int64_t(33), int64_t(100)}) {
      SCOPED_TRACE(::testing::Message() << name(kernel) << " W " << w);
      Qkv x = make_qkv(4, 2, 20, 33, 8, 8, DType::f32, 250);
      const Tensor g = uniform({1, 4, 20, 8}, 253, -1, 1, false, DType::f32);
      manual_seed(3);
      const RngState st = get_rng_state();
      const std::vector<Tensor> plain = attention_grads(x, g, windowed(kernel, 0, 0.1), st);
      const std::vector<Tensor> wide = attention_grads(x, g, windowed(kernel, w, 0.1), st);
      for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(bitwise_equal(plain[i], wide[i]));
    }
}

TEST(AttentionWindow, FlashMatchesEagerWithDropoutOverManyTiles) {
  // Several query and key tiles (partial last ones), windows shorter and longer than a tile, T != S;
  // dropout draws the same Philox positions in both kernels.
  struct Case {
    int64_t t, s, w;
  };
  for (Case c : {Case{300, 333, 70}, Case{300, 300, 257}, Case{130, 400, 5}})
    for (double p : {0.0, 0.15}) {
      SCOPED_TRACE(::testing::Message() << "T " << c.t << " S " << c.s << " W " << c.w << " dropout " << p);
      Qkv x = make_qkv(2, 1, c.t, c.s, 8, 6, DType::f64, 260);
      const Tensor g = uniform({1, 2, c.t, 6}, 263);
      manual_seed(4);
      const RngState st = get_rng_state();
      const std::vector<Tensor> eager = attention_grads(x, g, windowed(AttentionKernel::eager, c.w, p), st);
      const std::vector<Tensor> flash = attention_grads(x, g, windowed(AttentionKernel::flash, c.w, p), st);
      for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(all_close(flash[i], eager[i], 1e-10, 1e-12));
      if (p == 0) {
        EXPECT_TRUE(all_close(eager[0], reference_window(x.q, x.k, x.v, c.w), 1e-10, 1e-12));
      }
    }
}

TEST(AttentionWindow, BF16FlashMatchesEager) {
  Qkv x = make_qkv(4, 2, 150, 150, 16, 16, DType::bf16, 270);
  const Tensor ref = reference_window(x.q.to(DType::f64), x.k.to(DType::f64), x.v.to(DType::f64), 40);
  for (AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(name(kernel));
    const Tensor out = scaled_dot_product_attention(x.q, x.k, x.v, windowed(kernel, 40));
    EXPECT_EQ(out.dtype(), DType::bf16);
    EXPECT_TRUE(all_close(out.to(DType::f64), ref, 2e-2, 2e-2));
  }
  const Tensor eager = scaled_dot_product_attention(x.q, x.k, x.v, windowed(AttentionKernel::eager, 40));
  const Tensor flash = scaled_dot_product_attention(x.q, x.k, x.v, windowed(AttentionKernel::flash, 40));
  EXPECT_TRUE(all_close(flash.to(DType::f32), eager.to(DType::f32), 2e-2, 2e-2));
}

TEST(AttentionWindow, BadWindowsThrow) {
  const Tensor q = zeros({1, 2, 4, 8}), k = zeros({1, 2, 4, 8});
  for (AttentionKernel kernel : kKernels) {
    EXPECT_THROW(scaled_dot_product_attention(q, k, k, windowed(kernel, -1)), Error);
    AttentionOptions not_causal = windowed(kernel, 2);
    not_causal.causal = false;
    EXPECT_THROW(scaled_dot_product_attention(q, k, k, not_causal), Error);
  }
  EXPECT_THROW(scaled_masked_softmax(zeros({4, 4}), 1.0, true, -3), Error);
  EXPECT_THROW(scaled_masked_softmax(zeros({4, 4}), 1.0, false, 2), Error);
}

}  // namespace tidal
