// Dropout keyed by global positions (context parallelism): a piece of a tensor, or a block of an
// attention matrix, computed alone draws exactly the numbers the whole draws in one call.
#include <cmath>
#include <limits>
#include <string>

#include "tests/support/error_of.h"
#include "tests/support/gradcheck.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/index.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"

namespace tidal {
using testing::all_close;
using testing::bitwise_equal;
using testing::error_of;
using testing::gradcheck;
using testing::uniform;

namespace {

constexpr AttentionKernel kKernels[] = {AttentionKernel::eager, AttentionKernel::flash};

// The global rows of context-parallel rank r of c: chunks r and 2c-1-r of 2c equal chunks.
std::vector<int64_t> cp_rows(int64_t t_global, int64_t c, int64_t r) {
  const int64_t len = t_global / (2 * c);
  std::vector<int64_t> rows;
  for (int64_t chunk : {r, 2 * c - 1 - r})
    for (int64_t i = 0; i < len; ++i) rows.push_back(chunk * len + i);
  return rows;
}

Tensor index_of(const std::vector<int64_t>& rows) { return from_vector_i64(rows, {int64_t(rows.size())}); }

// log-sum-exp over keys of scale q k^T (causal: keys j <= i masked as the kernels do for T == S),
// (B, Hq, T, 1), from basic ops: the statistic ring attention merges blocks with.
Tensor block_lse(const Tensor& q, const Tensor& k, double scale, bool causal) {
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), d = q.size(3), hkv = k.size(1), s = k.size(2);
  Tensor kr = k.unsqueeze(2).expand({b, hkv, hq / hkv, s, d}).reshape({b, hq, s, d});
  Tensor scores = mul(matmul(q, kr.mT()), scale);
  if (causal) {
    std::vector<double> m(size_t(t * s));
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < s; ++j) m[size_t(i * s + j)] = j > i + s - t ? 1.0 : 0.0;
    scores = masked_fill(scores, gt(from_vector(m, {t, s}, q.dtype()), 0.5), -std::numeric_limits<double>::infinity());
  }
  Tensor mx = max(scores, -1, true).values.detach();
  return add(mx, log(sum(exp(sub(scores, mx)), {-1}, true)));
}

// Causal attention over n = 2c chunks computed block by block, (query chunk, key chunk <= it), each
// block a separate call with its global dropout frame, merged by log-sum-exp: what ring attention
// does, in one process.
Tensor blockwise_attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t chunks, AttentionOptions opt,
                           const RandomRange& range) {
  const int64_t t = q.size(2), len = t / chunks;
  const double scale = 1.0 / std::sqrt(double(q.size(3)));
  opt.dropout_frame.rows = t;
  opt.dropout_frame.cols = t;
  opt.dropout_frame.rng = range;
  std::vector<Tensor> rows;
  for (int64_t qi = 0; qi < chunks; ++qi) {
    const Tensor qc = q.narrow(2, qi * len, len);
    std::vector<Tensor> outs, lses;
    for (int64_t kj = 0; kj <= qi; ++kj) {
      const Tensor kc = k.narrow(2, kj * len, len), vc = v.narrow(2, kj * len, len);
      opt.causal = kj == qi;
      opt.dropout_frame.row_offset = qi * len;
      opt.dropout_frame.col_offset = kj * len;
      outs.push_back(scaled_dot_product_attention(qc, kc, vc, opt));
      lses.push_back(block_lse(qc, kc, scale, opt.causal));
    }
    Tensor all = cat(lses, -1);
    Tensor mx = max(all, -1, true).values.detach();
    Tensor lse = add(mx, log(sum(exp(sub(all, mx)), {-1}, true)));
    Tensor out = mul(outs[0], exp(sub(lses[0], lse)));
    for (size_t b = 1; b < outs.size(); ++b) out = add(out, mul(outs[b], exp(sub(lses[b], lse))));
    rows.push_back(out);
  }
  return cat(rows, 2);
}

// v (B, Hkv, S, S) = the identity over keys: attention then outputs its dropped probabilities.
Tensor one_hot_values(int64_t b, int64_t hkv, int64_t s) {
  std::vector<double> eye(size_t(s * s), 0.0);
  for (int64_t j = 0; j < s; ++j) eye[size_t(j * s + j)] = 1.0;
  return from_vector(eye, {1, 1, s, s}, DType::f64).expand({b, hkv, s, s});
}

AttentionOptions with(AttentionKernel kernel, bool causal, double p) {
  AttentionOptions o;
  o.kernel = kernel;
  o.causal = causal;
  o.dropout_p = p;
  return o;
}

}  // namespace

TEST(DropoutFrame, BlockwiseAttentionMatchesOneCall) {
  // (a) The whole causal matrix in one call equals its blocks with global frames, merged: output and
  // gradients to rounding, for C = 2 and 3 (4 and 6 chunks), GQA, both kernels.
  for (AttentionKernel kernel : kKernels)
    for (int64_t c : {2, 3}) {
      SCOPED_TRACE(::testing::Message() << "kernel " << int(kernel) << " C " << c);
      const int64_t t = 24;
      Tensor q = uniform({2, 4, t, 8}, 10), k = uniform({2, 2, t, 8}, 11), v = uniform({2, 2, t, 6}, 12);
      Tensor g = uniform({2, 4, t, 6}, 13, -1, 1, false);
      manual_seed(9);
      const RngState st = get_rng_state();
      Tensor whole = scaled_dot_product_attention(q, k, v, with(kernel, true, 0.4));
      whole.backward(g);
      const std::vector<Tensor> want = {whole, q.grad(), k.grad(), v.grad()};
      const RngState after = get_rng_state();
      for (const Tensor* x : {&q, &k, &v}) x->zero_grad();

      set_rng_state(st);
      const RandomRange range = reserve_attention_dropout(2, 4, t, t);
      EXPECT_EQ(get_rng_state(), after);  // the same reservation as the one call
      Tensor blocks = blockwise_attention(q, k, v, 2 * c, with(kernel, true, 0.4), range);
      EXPECT_EQ(get_rng_state(), after);  // blocks reserve nothing more
      blocks.backward(g);
      const std::vector<Tensor> got = {blocks, q.grad(), k.grad(), v.grad()};
      const char* names[] = {"out", "dq", "dk", "dv"};
      for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(all_close(got[i], want[i], 1e-10, 1e-12)) << names[i];
    }
}

TEST(DropoutFrame, BlocksDropTheSamePositions) {
  // (a) With one-hot values (v = I over keys) the output is the dropped probability matrix itself, so
  // its zeros are the mask: every block's zeros are the whole matrix's zeros there (p near 1/2,
  // blocks of unequal sizes, T != S), in both kernels.
  const int64_t t = 13, s = 11;
  Tensor q = uniform({2, 2, t, 4}, 20, -1, 1, false), k = uniform({2, 1, s, 4}, 21, -1, 1, false);
  Tensor v = one_hot_values(2, 1, s);
  for (AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(::testing::Message() << "kernel " << int(kernel));
    manual_seed(3);
    const RngState st = get_rng_state();
    Tensor whole = scaled_dot_product_attention(q, k, v, with(kernel, false, 0.5));
    const double dropped = sum(eq(whole, 0.0).to(DType::f64)).to_vector<double>()[0] / double(whole.numel());
    EXPECT_GT(dropped, 0.35);
    EXPECT_LT(dropped, 0.65);
    set_rng_state(st);
    AttentionOptions opt = with(kernel, false, 0.5);
    opt.dropout_frame.rows = t;
    opt.dropout_frame.cols = s;
    opt.dropout_frame.rng = reserve_attention_dropout(2, 2, t, s);
    for (auto [r0, nr] : {std::pair<int64_t, int64_t>{0, 5}, {5, 8}})
      for (auto [c0, nc] : {std::pair<int64_t, int64_t>{0, 4}, {4, 7}}) {
        SCOPED_TRACE(::testing::Message() << "rows " << r0 << "+" << nr << " cols " << c0 << "+" << nc);
        opt.dropout_frame.row_offset = r0;
        opt.dropout_frame.col_offset = c0;
        Tensor block = scaled_dot_product_attention(q.narrow(2, r0, nr), k.narrow(2, c0, nc),
                                                    v.narrow(2, c0, nc).narrow(3, c0, nc), opt);
        EXPECT_TRUE(bitwise_equal(eq(block, 0.0), eq(whole.narrow(2, r0, nr).narrow(3, c0, nc), 0.0)));
      }
  }
}

TEST(DropoutFrame, DefaultsDrawTheDocumentedPositions) {
  // (c) Without a frame, probability (b, h, i, j) draws start + ((b*Hq + h)*T + i)*S + j: the mask of
  // dropout() over a (B, Hq, T, S) tensor from the same state. A frame that is the call itself,
  // with the range given explicitly, changes nothing, bit for bit.
  const int64_t t = 9, s = 7;
  Tensor q = uniform({2, 2, t, 4}, 30, -1, 1, false), k = uniform({2, 2, s, 4}, 31, -1, 1, false);
  Tensor v = one_hot_values(2, 2, s);
  for (AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(::testing::Message() << "kernel " << int(kernel));
    manual_seed(8);
    const RngState st = get_rng_state();
    Tensor plain = scaled_dot_product_attention(q, k, v, with(kernel, false, 0.5));
    set_rng_state(st);
    Tensor mask = dropout(ones({2, 2, t, s}), 0.5);
    EXPECT_TRUE(bitwise_equal(eq(plain, 0.0), eq(mask, 0.0)));
    set_rng_state(st);
    AttentionOptions opt = with(kernel, false, 0.5);
    opt.dropout_frame.rows = t;
    opt.dropout_frame.cols = s;
    opt.dropout_frame.rng = reserve_attention_dropout(2, 2, t, s);
    EXPECT_TRUE(bitwise_equal(scaled_dot_product_attention(q, k, v, opt), plain));
  }
}

TEST(DropoutFrame, AttentionRefusesAFrameWithoutTheBlock) {
  Tensor q = uniform({1, 2, 4, 3}, 40, -1, 1, false), k = uniform({1, 2, 6, 3}, 41, -1, 1, false);
  for (AttentionKernel kernel : kKernels) {
    AttentionOptions opt = with(kernel, false, 0.1);
    opt.dropout_frame.rows = 8;
    opt.dropout_frame.cols = 6;
    opt.dropout_frame.row_offset = 5;
    EXPECT_NE(error_of([&] {
                scaled_dot_product_attention(q, k, k, opt);
              }).find("dropout_frame (8 x 6 from row 5, column 0) does not contain the block of 4 query rows x 6 keys"),
              std::string::npos);
    opt.dropout_frame.row_offset = 4;
    opt.dropout_frame.col_offset = 1;
    EXPECT_NE(error_of([&] { scaled_dot_product_attention(q, k, k, opt); }).find("does not contain the block"),
              std::string::npos);
    opt.dropout_frame.col_offset = -1;
    EXPECT_NE(error_of([&] { scaled_dot_product_attention(q, k, k, opt); }).find("must be non-negative"),
              std::string::npos);
    opt.dropout_frame.col_offset = 0;
    opt.dropout_frame.rng = reserve_attention_dropout(1, 2, 8, 7);
    EXPECT_NE(error_of([&] {
                scaled_dot_product_attention(q, k, k, opt);
              }).find("dropout_frame.rng holds 112 positions but the whole matrix (B*Hq*T_g*S_g) needs 96"),
              std::string::npos);
    opt.dropout_frame.rng = reserve_attention_dropout(1, 2, 8, 6);
    EXPECT_EQ(error_of([&] { scaled_dot_product_attention(q, k, k, opt); }), "no error");
  }
}

TEST(DropoutFrame, RowsOfEveryRankReproduceTheWholeMask) {
  // (b) The two chunks of each of C ranks, drawn separately from the one reserved range, are the
  // whole tensor's dropout bit for bit (mask and values), and every rank's stream moves as the
  // whole call's does. Rows of 15 elements (not a multiple of 4) and of 1100 (over one buffer).
  for (int64_t row_elems : {15, 1100})
    for (DType dtype : {DType::f32, DType::bf16})
      for (int64_t c : {2, 3}) {
        SCOPED_TRACE(::testing::Message() << "C " << c << " row " << row_elems << " " << dtype);
        const int64_t t = 12;
        Tensor x = uniform({2, t, row_elems}, 50, 0.5, 1.5, false, dtype);
        if (row_elems == 15) x = x.view({2, t, 3, 5});
        manual_seed(21);
        const RngState st = get_rng_state();
        Tensor whole = dropout(x, 0.5);
        const RngState after = get_rng_state();
        for (int64_t r = 0; r < c; ++r) {
          const std::vector<int64_t> rows = cp_rows(t, c, r);
          set_rng_state(st);
          const RowFrame f = reserve_row_frame(2, t, row_elems, rows);
          EXPECT_EQ(get_rng_state(), after);
          Tensor piece = dropout_rows(index_select(x, 1, index_of(rows)), 0.5, f);
          EXPECT_TRUE(bitwise_equal(piece, index_select(whole, 1, index_of(rows)))) << "rank " << r;
        }
      }
}

TEST(DropoutFrame, RowsGradcheckAndChecks) {
  // (d) The backward is dropout's: the saved mask times 1/(1-p), on a strided input too.
  Tensor x = uniform({2, 6, 5}, 60);
  const RowFrame f = reserve_row_frame(2, 10, 5, {7, 1, 2, 9, 0, 4});
  EXPECT_TRUE(gradcheck([&](auto& a) { return dropout_rows(a[0], 0.3, f); }, {x}));
  Tensor xt = uniform({2, 5, 6}, 61);
  EXPECT_TRUE(gradcheck([&](auto& a) { return dropout_rows(a[0].transpose(1, 2), 0.3, f); }, {xt}));
  Tensor y = dropout_rows(x, 0.3, f);
  EXPECT_FALSE(bitwise_equal(y, x));
  EXPECT_TRUE(bitwise_equal(dropout_rows(x, 0.3, f), y));  // the frame fixes the draw
  EXPECT_TRUE(bitwise_equal(dropout_rows(x, 0.3, f, /*training=*/false), x));
  EXPECT_TRUE(bitwise_equal(dropout_rows(x, 0.0, f), x));

  EXPECT_NE(error_of([&] {
              dropout_rows(x.narrow(1, 0, 4), 0.3, f);
            }).find("[dropout_rows] frame.rows has 6 entries but x has 4 rows"),
            std::string::npos);
  RowFrame bad = f;
  bad.rows[3] = 10;
  EXPECT_NE(error_of([&] { dropout_rows(x, 0.3, bad); }).find("frame.rows[3] = 10 is outside the global rows [0, 10)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              dropout_rows(x.narrow(2, 0, 4), 0.3, f);
            }).find("frame.rng holds 100 positions but the whole tensor (B 2, T_g 10, C 4) needs 80"),
            std::string::npos);
  EXPECT_NE(error_of([&] { dropout_rows(x, 1.0, f); }).find("probability must be in [0, 1)"), std::string::npos);
  EXPECT_NE(error_of([&] { dropout_rows(x.select(0, 0).select(0, 0), 0.3, f); }).find("must be (B, T_local, C...)"),
            std::string::npos);
}

}  // namespace tidal
