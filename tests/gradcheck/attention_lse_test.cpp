// attention_with_lse (ops/attention.h): the flash kernel's output and log-sum-exp, both differentiable, with GQA,
// a sliding window and compressed keys (AttentionOptions::key_rate); merging two calls by a softmax over their
// log-sum-exps and a sink logit is one attention over all their keys. sparse_attention_with_lse
// (ops/sparse_attention.h): each query over the keys kept for it, against a gather and composed ops.
#include <cmath>
#include <limits>

#include "tests/support/gradcheck.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/index.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/softmax.h"
#include "tidal/ops/sparse_attention.h"
#include "tidal/ops/view.h"

namespace tidal {
using testing::all_close;
using testing::gradcheck;
using testing::uniform;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Whether query i of T sees key j of S: the window's bottom-right causal rule, or compressed keys (j + 1) R <= i + 1.
bool visible(int64_t i, int64_t j, int64_t t, int64_t s, int64_t window, int64_t rate) {
  if (rate > 0) return (j + 1) * rate <= i + 1;
  const int64_t diag = i + s - t;
  return j <= diag && (window == 0 || j > diag - window);
}

// The additive mask (T, S): 0 where visible, -inf elsewhere.
Tensor additive_mask(int64_t t, int64_t s, int64_t window, int64_t rate) {
  std::vector<double> m(size_t(t * s), -kInf);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < s; ++j)
      if (visible(i, j, t, s, window, rate)) m[size_t(i * s + j)] = 0.0;
  return from_vector(m, {t, s}, DType::f64);
}

// Scores scale q k^T + mask (B, Hq, T, S) from basic ops, k heads repeated for GQA.
Tensor reference_scores(const Tensor& q, const Tensor& k, const Tensor& mask) {
  const int64_t b = q.size(0), hq = q.size(1), hkv = k.size(1), s = k.size(2), d = q.size(3), g = hq / hkv;
  Tensor kr = k.unsqueeze(2).expand({b, hkv, g, s, d}).reshape({b, hq, s, d});  // (B, Hq, S, D)
  return add(mul(matmul(q, kr.mT()), 1.0 / std::sqrt(double(d))), mask);
}

// Rows that see no key get lse +inf: finite stand-ins for the checks (their gradient is 0).
Tensor finite_lse(const Tensor& lse) { return masked_fill(lse, eq(lse, kInf), 0.0); }

AttentionOptions options(int64_t window, int64_t rate) {
  AttentionOptions o;
  o.window = window;
  o.key_rate = rate;
  return o;
}

}  // namespace

TEST(GradcheckAttentionWithLse, OutputAndLogSumExpWithGqaWindowAndCompressedKeys) {
  struct Case {
    int64_t t, s, window, rate;
  };
  // Plain causal, a window of 3, and compressed keys of rate 3 over 12 queries (4 keys; rows 0 and 1 see none).
  for (Case c : {Case{9, 9, 0, 0}, Case{9, 9, 3, 0}, Case{12, 4, 0, 3}}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.t << " S " << c.s << " W " << c.window << " R " << c.rate);
    const Tensor q = uniform({1, 4, c.t, 3}, 300, -1, 1, true, DType::f64);
    const Tensor k = uniform({1, 2, c.s, 3}, 301, -1, 1, true, DType::f64);
    const Tensor v = uniform({1, 2, c.s, 5}, 302, -1, 1, true, DType::f64);
    const AttentionOptions opt = options(c.window, c.rate);
    EXPECT_TRUE(gradcheck(
        [&](auto& a) {
          const AttentionWithLse r = attention_with_lse(a[0], a[1], a[2], opt);
          return add(r.out, mul(finite_lse(r.lse).unsqueeze(-1), 0.7));  // both outputs reach the loss
        },
        {q, k, v}));
    const AttentionWithLse r = attention_with_lse(q, k, v, opt);
    const Tensor scores = reference_scores(q, k, additive_mask(c.t, c.s, c.window, c.rate));  // (B, Hq, T, S)
    const Tensor m = max(scores, -1, true).values;
    const Tensor lse = add(log(sum(exp(sub(scores, m)), {-1}, true)), m).squeeze(-1);  // (B, Hq, T)
    std::vector<double> got = r.lse.to_vector<double>(), want = lse.to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isinf(want[i]) || std::isnan(want[i])) {  // no key: +inf (the reference's -inf - -inf is nan)
        EXPECT_EQ(got[i], kInf) << "row " << i;
        continue;
      }
      EXPECT_NEAR(got[i], want[i], 1e-12) << "row " << i;
    }
    EXPECT_TRUE(all_close(r.out, scaled_dot_product_attention(q, k, v, opt), 0, 0));  // the same output
  }
}

TEST(AttentionWithLse, MergingTwoCallsAndASinkIsOneSoftmaxOverAllKeys) {
  // A window's keys (rows 0..T-1) and compressed entries (rate 4) merged by a softmax over [lse_a, lse_b, sink]:
  // softmax over the scores of both key sets and the sink column, the sink's share dropped; gradients too.
  const int64_t t = 16, w = 3, rate = 4, e = t / rate;
  const Tensor q = uniform({2, 2, t, 4}, 310, -1, 1, true, DType::f64);
  const Tensor kv = uniform({2, 1, t, 4}, 311, -1, 1, true, DType::f64);
  const Tensor entries = uniform({2, 1, e, 4}, 312, -1, 1, true, DType::f64);
  const Tensor sink = uniform({2}, 313, -1, 1, true, DType::f64);
  const auto merged = [&](const std::vector<Tensor>& x) {
    const AttentionWithLse a = attention_with_lse(x[0], x[1], x[1], options(w, 0));
    const AttentionWithLse b = attention_with_lse(x[0], x[2], x[2], options(0, rate));
    const Tensor lse_b = masked_fill(b.lse, eq(b.lse, kInf), -kInf);  // no entry yet: weighs 0
    const Tensor s = x[3].view({1, 2, 1}).expand({2, 2, t});
    const Tensor weights = softmax(stack({a.lse, lse_b, s}, -1), -1);  // (B, H, T, 3)
    return add(mul(a.out, weights.narrow(3, 0, 1)), mul(b.out, weights.narrow(3, 1, 1)));
  };
  const auto reference = [&](const std::vector<Tensor>& x) {
    const Tensor mask = cat({additive_mask(t, t, w, 0), additive_mask(t, e, 0, rate)}, 1);  // (T, T + E)
    const Tensor keys = cat({x[1], x[2]}, 2);                                               // (B, 1, T + E, D)
    const Tensor scores = reference_scores(x[0], keys, mask);                               // (B, H, T, T + E)
    const Tensor s = x[3].view({1, 2, 1, 1}).expand({2, 2, t, 1});
    const Tensor p = softmax(cat({scores, s}, 3), -1).narrow(3, 0, t + e);
    return matmul(p, keys);  // (B, H, T, D)
  };
  const std::vector<Tensor> x = {q, kv, entries, sink};
  const Tensor got = merged(x), want = reference(x);
  EXPECT_TRUE(all_close(got, want, 1e-12, 1e-13));
  const Tensor g = uniform(got.shape(), 314, -1, 1, false, DType::f64);
  const auto grads_of = [&](const Tensor& out) {
    for (const Tensor& t : x) t.zero_grad();
    out.backward(g);
    std::vector<Tensor> d;
    for (const Tensor& t : x) d.push_back(t.grad());
    return d;
  };
  const std::vector<Tensor> dm = grads_of(got), dr = grads_of(want);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_TRUE(all_close(dm[i], dr[i], 1e-11, 1e-12)) << "input " << i;
  EXPECT_TRUE(gradcheck([&](auto& a) { return merged(a); }, x));
}

// The sparse attention from basic ops: each row's kept keys gathered (an empty slot reads key 0, masked), scores,
// the log-sum-exp and the softmax; rows with no key kept: out 0, lse -inf.
AttentionWithLse reference_sparse(const Tensor& q, const Tensor& keys, const Tensor& values,
                                  const std::vector<int32_t>& kept, int64_t k) {
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t hkv = keys.size(1), w = keys.size(2), dv = values.size(3), g = hq / hkv;
  std::vector<int64_t> rows;  // (B, T, k) into the keys flattened (B Hkv W), for kv head 0 (+ W per head)
  std::vector<double> mask;
  for (int64_t r = 0; r < b * t; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = kept[size_t(r * k + j)];
      rows.push_back((r / t) * hkv * w + std::max<int32_t>(e, 0));
      mask.push_back(e < 0 ? -kInf : 0.0);
    }
  const Tensor idx = from_vector_i64(rows, {b * t * k});
  const Tensor m = from_vector(mask, {b, 1, t, k}, DType::f64);
  std::vector<Tensor> outs, lses;
  for (int64_t h = 0; h < hq; ++h) {  // head h reads kv head h / g: its rows sit W * (h / g) further
    const Tensor shift = from_vector_i64(std::vector<int64_t>(size_t(b * t * k), (h / g) * w), {b * t * k});
    const Tensor kh = index_select(keys.reshape({b * hkv * w, d}), 0, add(idx, shift)).view({b, 1, t, k, d});
    const Tensor vh = index_select(values.reshape({b * hkv * w, dv}), 0, add(idx, shift)).view({b, 1, t, k, dv});
    const Tensor qh = q.narrow(1, h, 1).unsqueeze(3);                                    // (B, 1, T, 1, D)
    Tensor s = add(mul(matmul(qh, kh.mT()).squeeze(3), 1.0 / std::sqrt(double(d))), m);  // (B, 1, T, k)
    const Tensor mx = masked_fill(max(s, -1, true).values, eq(max(s, -1, true).values, -kInf), 0.0);
    const Tensor e = exp(sub(s, mx));
    const Tensor l = sum(e, {-1}, true);
    lses.push_back(add(log(l), mx).squeeze(-1));  // -inf where nothing is kept
    const Tensor p = div(e, masked_fill(l, eq(l, 0.0), 1.0));
    outs.push_back(matmul(p.unsqueeze(3), vh).squeeze(3));  // (B, 1, T, Dv)
  }
  return {cat(outs, 1), cat(lses, 1)};
}

TEST(GradcheckSparseAttention, OverKeptKeysWithGqaEmptySlotsAndARowWithNone) {
  const int64_t t = 6, w = 5, k = 3;
  // Row 0 keeps nothing; rows repeat keys across rows (and one row keeps a key twice); -1 slots anywhere.
  const std::vector<int32_t> kept = {-1, -1, -1, 0,  -1, -1, 1, 0, -1, 2, 2,  4,  3, 0, 1, 4, -1, 2,    // sample 0
                                     0,  1,  2,  -1, 3,  -1, 4, 4, 0,  1, -1, -1, 2, 3, 4, 0, 0,  -1};  // sample 1
  Tensor idx = empty({2, t, k}, DType::i32);
  std::copy(kept.begin(), kept.end(), idx.data<int32_t>());
  for (const int64_t hkv : {int64_t(1), int64_t(2)}) {
    SCOPED_TRACE(::testing::Message() << hkv << " key heads");
    const Tensor q = uniform({2, 4, t, 3}, 330, -1, 1, true, DType::f64);
    const Tensor keys = uniform({2, hkv, w, 3}, 331, -1, 1, true, DType::f64);
    const Tensor values = uniform({2, hkv, w, 2}, 332, -1, 1, true, DType::f64);
    const AttentionWithLse got = sparse_attention_with_lse(q, keys, values, idx);
    const AttentionWithLse want = reference_sparse(q, keys, values, kept, k);
    EXPECT_TRUE(all_close(got.out, want.out, 1e-12, 1e-13));
    const std::vector<double> gl = got.lse.to_vector<double>(), wl = want.lse.to_vector<double>();
    for (size_t i = 0; i < gl.size(); ++i) {
      if (std::isinf(wl[i]))
        EXPECT_EQ(gl[i], -kInf) << i;
      else
        EXPECT_NEAR(gl[i], wl[i], 1e-12) << i;
    }
    EXPECT_TRUE(gradcheck(
        [&](auto& a) {
          const AttentionWithLse r = sparse_attention_with_lse(a[0], a[1], a[2], idx);
          return add(r.out, mul(masked_fill(r.lse, eq(r.lse, -kInf), 0.0).unsqueeze(-1), 0.7));
        },
        {q, keys, values}));
    // Keys and values one tensor (DeepSeek-V4's shared entries): both gradients summed.
    EXPECT_TRUE(gradcheck([&](auto& a) { return sparse_attention_with_lse(a[0], a[1], a[1], idx).out; }, {q, keys}));
  }
}

TEST(SparseAttention, RefusesBadIndicesAndShapes) {
  const Tensor q = uniform({1, 2, 4, 3}, 340), keys = uniform({1, 1, 5, 3}, 341);
  Tensor idx = empty({1, 4, 2}, DType::i32);
  for (int64_t i = 0; i < 8; ++i) idx.data<int32_t>()[i] = int32_t(i % 5);
  EXPECT_NO_THROW(sparse_attention_with_lse(q, keys, keys, idx));
  idx.data<int32_t>()[5] = 5;  // not one of the 5 keys
  try {
    sparse_attention_with_lse(q, keys, keys, idx);
    ADD_FAILURE() << "an index out of range was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kept index 5 at position 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sparse_attention_with_lse(q, keys, keys, idx.to(DType::i64)), Error);
  EXPECT_THROW(sparse_attention_with_lse(q, keys, keys, empty({1, 3, 2}, DType::i32)), Error);  // T differs
}

TEST(AttentionWithLse, RefusesWhatItCannotCompute) {
  const Tensor q = uniform({1, 2, 8, 4}, 320), k = uniform({1, 2, 8, 4}, 321);
  AttentionOptions eager;
  eager.kernel = AttentionKernel::eager;
  EXPECT_THROW(attention_with_lse(q, k, k, eager), Error);
  AttentionOptions windowed = options(2, 4);  // compressed keys with a window
  EXPECT_THROW(attention_with_lse(q, k, k, windowed), Error);
  EXPECT_THROW(attention_with_lse(q, k, k, options(0, -1)), Error);
}

}  // namespace tidal
