#include <array>
#include <cmath>
#include <limits>

#include "tests/support/gradcheck.h"
#include "tidal/autograd/saved_tensor.h"
#include "tidal/base/threads.h"
#include "tidal/ops/attention.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal {
using testing::all_close;
using testing::bitwise_equal;
using testing::gradcheck;
using testing::uniform;

namespace {

constexpr AttentionKernel kKernels[] = {AttentionKernel::eager, AttentionKernel::flash};

AttentionOptions options(AttentionKernel kernel, bool causal, double dropout_p = 0, double scale = 0) {
  AttentionOptions o;
  o.kernel = kernel;
  o.causal = causal;
  o.dropout_p = dropout_p;
  o.scale = scale;
  return o;
}

// softmax(scale q k^T + mask) v from basic ops, with k/v heads repeated for GQA.
Tensor reference_attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt) {
  const int64_t b = q.size(0), hq = q.size(1), t = q.size(2), d = q.size(3);
  const int64_t hkv = k.size(1), s = k.size(2), dv = v.size(3), g = hq / hkv;
  Tensor kr = k.unsqueeze(2).expand({b, hkv, g, s, d}).reshape({b, hq, s, d});
  Tensor vr = v.unsqueeze(2).expand({b, hkv, g, s, dv}).reshape({b, hq, s, dv});
  const double scale = opt.scale != 0 ? opt.scale : 1.0 / std::sqrt(double(d));
  Tensor scores = mul(matmul(q, kr.mT()), scale);
  if (opt.causal) {
    std::vector<double> m(size_t(t * s));
    for (int64_t i = 0; i < t; ++i)
      for (int64_t j = 0; j < s; ++j) m[size_t(i * s + j)] = j > i + s - t ? 1.0 : 0.0;
    scores = masked_fill(scores, gt(from_vector(m, {t, s}, q.dtype()), 0.5), -std::numeric_limits<double>::infinity());
  }
  Tensor e = exp(sub(scores, max(scores, -1, true).values));
  Tensor p = dropout(div(e, sum(e, {-1}, true)), opt.dropout_p);
  return matmul(p, vr);
}

// Inputs as transposed views of (B, T, H, D) projections, the layout a model hands over.
struct Qkv {
  Tensor q, k, v;  // leaves, (B, T, H, D)
  Tensor qh() const { return q.transpose(1, 2); }
  Tensor kh() const { return k.transpose(1, 2); }
  Tensor vh() const { return v.transpose(1, 2); }
};

Qkv make_qkv(int64_t b, int64_t hq, int64_t hkv, int64_t t, int64_t s, int64_t d, int64_t dv, DType dtype,
             uint64_t seed) {
  Qkv x{uniform({b, t, hq, d}, seed, -1, 1, true, dtype), uniform({b, s, hkv, d}, seed + 1, -1, 1, true, dtype),
        uniform({b, s, hkv, dv}, seed + 2, -1, 1, true, dtype)};
  return x;
}

// Attention over (B, T, H, D) tensors seen as (B, H, T, D), as a gradcheck function.
Tensor attend_bthd(const std::vector<Tensor>& t, const AttentionOptions& opt) {
  return scaled_dot_product_attention(t[0].transpose(1, 2), t[1].transpose(1, 2), t[2].transpose(1, 2), opt);
}

// Saved-tensor hooks that record what is packed.
struct Recorder : autograd::SavedTensorHooks {
  std::vector<Tensor> saved;
  std::shared_ptr<void> pack(const Tensor& t) override {
    saved.push_back(t);
    return std::make_shared<Tensor>(t);
  }
  Tensor unpack(const std::shared_ptr<void>& p) override { return *std::static_pointer_cast<Tensor>(p); }
};

// Output and q/k/v gradients of one call from RNG state `st`, each kernel: {eager, flash} x
// {out, dq, dk, dv}.
std::array<std::vector<Tensor>, 2> run_both(const Qkv& x, const Tensor& g, bool causal, double p, const RngState& st) {
  std::array<std::vector<Tensor>, 2> results;
  for (int kk = 0; kk < 2; ++kk) {
    set_rng_state(st);
    for (const Tensor* t : {&x.q, &x.k, &x.v}) t->zero_grad();
    Tensor out = scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), options(kKernels[kk], causal, p));
    out.backward(g);
    results[size_t(kk)] = {out, x.q.grad(), x.k.grad(), x.v.grad()};
  }
  return results;
}

}  // namespace

TEST(GradcheckAttention, CausalAndNotGqa) {
  for (AttentionKernel kernel : kKernels)
    for (bool causal : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "kernel " << int(kernel) << " causal " << causal);
      Qkv x = make_qkv(2, 4, 2, 5, 5, 3, 4, DType::f64, 10);
      const AttentionOptions opt = options(kernel, causal);
      EXPECT_TRUE(gradcheck([&](auto& t) { return attend_bthd(t, opt); }, {x.q, x.k, x.v}));
    }
}

TEST(GradcheckAttention, LengthsDifferAndContiguousInputs) {
  // T < S (a query chunk after a cache), T > S (rows that see no key under the causal mask).
  for (AttentionKernel kernel : kKernels)
    for (auto [t, s] : {std::pair<int64_t, int64_t>{3, 6}, {6, 4}, {1, 5}}) {  // T = 1: decoding
      SCOPED_TRACE(::testing::Message() << "kernel " << int(kernel) << " T " << t << " S " << s);
      Tensor q = uniform({1, 4, t, 3}, 20), k = uniform({1, 2, s, 3}, 21), v = uniform({1, 2, s, 2}, 22);
      const AttentionOptions opt = options(kernel, true, 0, 0.7);
      EXPECT_TRUE(gradcheck([&](auto& a) { return scaled_dot_product_attention(a[0], a[1], a[2], opt); }, {q, k, v}));
      const AttentionOptions full = options(kernel, false);
      EXPECT_TRUE(gradcheck([&](auto& a) { return scaled_dot_product_attention(a[0], a[1], a[2], full); }, {q, k, v}));
    }
}

TEST(GradcheckAttention, Dropout) {
  for (AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(::testing::Message() << "kernel " << int(kernel));
    Qkv x = make_qkv(1, 4, 2, 5, 6, 3, 3, DType::f64, 30);
    const AttentionOptions opt = options(kernel, true, 0.3);
    manual_seed(77);
    const RngState st = get_rng_state();
    EXPECT_TRUE(gradcheck(
        [&](auto& t) {
          set_rng_state(st);  // every evaluation draws the same mask
          return attend_bthd(t, opt);
        },
        {x.q, x.k, x.v}));
  }
}

TEST(GradcheckAttention, ScaledMaskedSoftmax) {
  Tensor x = uniform({2, 3, 5}, 40, -2, 2);
  EXPECT_TRUE(gradcheck([](auto& t) { return scaled_masked_softmax(t[0], 0.8, true); }, {x}));
  Tensor xt = uniform({2, 5, 3}, 41);
  EXPECT_TRUE(gradcheck([](auto& t) { return scaled_masked_softmax(t[0].transpose(1, 2), 1.3, false); }, {xt}));
}

TEST(Attention, MatchesNaiveReference) {
  for (DType dtype : {DType::f64, DType::f32})
    for (AttentionKernel kernel : kKernels)
      for (bool causal : {true, false}) {
        SCOPED_TRACE(::testing::Message() << dtype << " kernel " << int(kernel) << " causal " << causal);
        Qkv x = make_qkv(2, 6, 3, 37, 45, 16, 24, dtype, 50);
        const AttentionOptions opt = options(kernel, causal);
        Tensor out = scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), opt);
        Tensor ref = reference_attention(x.qh(), x.kh(), x.vh(), opt);
        const double tol = dtype == DType::f64 ? 1e-12 : 2e-6;
        EXPECT_TRUE(all_close(out, ref, tol, tol));
      }
}

TEST(Attention, EagerAndFlashAgreeInF32) {
  manual_seed(5);
  for (double p : {0.0, 0.2}) {
    SCOPED_TRACE(::testing::Message() << "dropout " << p);
    Qkv x = make_qkv(2, 4, 2, 100, 100, 32, 32, DType::f32, 60);
    Tensor g = uniform({2, 4, 100, 32}, 63, -1, 1, false, DType::f32);
    const RngState st = get_rng_state();
    const auto results = run_both(x, g, true, p, st);
    EXPECT_EQ(get_rng_state().offset, st.offset + (p > 0 ? 2 * 4 * 100 * 100 : 0));  // B*Hq*T*S per call
    const char* names[] = {"out", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i) {
      SCOPED_TRACE(names[i]);
      EXPECT_TRUE(all_close(results[1][size_t(i)], results[0][size_t(i)], 1e-4, 2e-5));
    }
  }
  // Dropout changes the result (the mask is not all ones).
  Qkv x = make_qkv(1, 2, 2, 16, 16, 8, 8, DType::f32, 70);
  Tensor plain = scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), options(AttentionKernel::flash, true));
  Tensor dropped = scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), options(AttentionKernel::flash, true, 0.5));
  EXPECT_FALSE(all_close(plain, dropped, 1e-3, 1e-3));
}

TEST(Attention, ManyTilesAgreeInF64) {
  // Several query and key tiles (partial last ones) exercise the online-softmax rescaling.
  for (bool causal : {true, false})
    for (double p : {0.0, 0.1}) {
      SCOPED_TRACE(::testing::Message() << "causal " << causal << " dropout " << p);
      Qkv x = make_qkv(1, 2, 1, 300, 333, 8, 6, DType::f64, 110);
      Tensor g = uniform({1, 2, 300, 6}, 113);
      manual_seed(4);
      const auto results = run_both(x, g, causal, p, get_rng_state());
      for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(all_close(results[1][i], results[0][i], 1e-10, 1e-12));
    }
}

TEST(Attention, FlashLayoutAndDeterminism) {
  Qkv x = make_qkv(2, 4, 1, 70, 70, 16, 8, DType::f32, 80);
  Tensor g = uniform({2, 4, 70, 8}, 83, -1, 1, false, DType::f32);
  const int saved = num_threads();
  std::vector<Tensor> runs[2];
  for (int r = 0; r < 2; ++r) {
    set_num_threads(r == 0 ? 1 : std::max(2, saved));
    for (const Tensor* t : {&x.q, &x.k, &x.v}) t->zero_grad();
    manual_seed(9);
    Tensor out = scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), options(AttentionKernel::flash, true, 0.1));
    EXPECT_TRUE(out.transpose(1, 2).is_contiguous());  // (B, T, Hq, Dv) memory order
    out.backward(g);
    EXPECT_TRUE(x.q.grad().is_contiguous());  // gradients come back in the inputs' (B, T, H, D) order
    runs[r] = {out, x.q.grad(), x.k.grad(), x.v.grad()};
  }
  set_num_threads(saved);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(bitwise_equal(runs[0][i], runs[1][i]));
}

TEST(Attention, SplitBackwardIsDeterministicAndAgreesWithEager) {
  // One sample, one kv head, 600 keys: the backward cuts the 5 key tiles into 4 tasks (kMinBackwardTasks) whose dq
  // partials are summed in split order: the same bits on 1 and 2 threads, and the eager kernel's gradients.
  Qkv x = make_qkv(1, 4, 1, 600, 600, 16, 8, DType::f32, 86);
  Tensor g = uniform({1, 4, 600, 8}, 87, -1, 1, false, DType::f32);
  const int saved = num_threads();
  std::vector<Tensor> runs[2];
  for (int r = 0; r < 2; ++r) {
    set_num_threads(r == 0 ? 1 : std::max(2, saved));
    for (const Tensor* t : {&x.q, &x.k, &x.v}) t->zero_grad();
    scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), options(AttentionKernel::flash, true, 0.0)).backward(g);
    runs[r] = {x.q.grad(), x.k.grad(), x.v.grad()};
  }
  set_num_threads(saved);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(bitwise_equal(runs[0][i], runs[1][i])) << i;
  for (const Tensor* t : {&x.q, &x.k, &x.v}) t->zero_grad();
  scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), options(AttentionKernel::eager, true, 0.0)).backward(g);
  const Tensor eager[] = {x.q.grad(), x.k.grad(), x.v.grad()};
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(all_close(runs[0][i], eager[i], 1e-4, 1e-5)) << i;
}

TEST(Attention, BroadcastOutputGradient) {
  // sum(out).backward() hands the backward a stride-0 gradient.
  Qkv x = make_qkv(1, 4, 2, 20, 20, 8, 8, DType::f64, 85);
  std::vector<Tensor> grads[2];
  for (int kk = 0; kk < 2; ++kk) {
    for (const Tensor* t : {&x.q, &x.k, &x.v}) t->zero_grad();
    sum(scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), options(kKernels[kk], true))).backward();
    grads[kk] = {x.q.grad(), x.k.grad(), x.v.grad()};
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(all_close(grads[1][i], grads[0][i], 1e-12, 1e-12));
}

TEST(Attention, RowsWithoutKeysAreZero) {
  for (AttentionKernel kernel : kKernels) {
    Qkv x = make_qkv(1, 2, 2, 6, 4, 4, 4, DType::f64, 90);
    Tensor out = scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), options(kernel, true));
    EXPECT_TRUE(all_close(out.narrow(2, 0, 2), zeros({1, 2, 2, 4}, DType::f64), 0, 0));  // rows i < T - S
    Tensor ref = reference_attention(x.qh(), x.kh(), x.vh(), options(kernel, true));
    EXPECT_TRUE(all_close(out.narrow(2, 2, 4), ref.narrow(2, 2, 4), 1e-12, 1e-12));
  }
}

TEST(Attention, BF16ComputesInF32) {
  Qkv x = make_qkv(1, 4, 2, 40, 40, 16, 16, DType::f32, 95);
  Tensor g = uniform({1, 4, 40, 16}, 96, -1, 1, false, DType::f32);
  Tensor ref = scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), options(AttentionKernel::flash, true));
  ref.backward(g);
  const std::vector<Tensor> ref_grads = {x.q.grad(), x.k.grad(), x.v.grad()};
  Qkv xb{x.q.detach().to(DType::bf16).set_requires_grad(true), x.k.detach().to(DType::bf16).set_requires_grad(true),
         x.v.detach().to(DType::bf16).set_requires_grad(true)};
  for (AttentionKernel kernel : kKernels) {
    SCOPED_TRACE(::testing::Message() << "kernel " << int(kernel));
    for (const Tensor* t : {&xb.q, &xb.k, &xb.v}) t->zero_grad();
    Tensor out = scaled_dot_product_attention(xb.qh(), xb.kh(), xb.vh(), options(kernel, true));
    EXPECT_EQ(out.dtype(), DType::bf16);
    EXPECT_TRUE(all_close(out.to(DType::f32), ref, 2e-2, 2e-2));
    out.backward(g.to(DType::bf16));
    const std::vector<Tensor> grads = {xb.q.grad(), xb.k.grad(), xb.v.grad()};
    for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(all_close(grads[i].to(DType::f32), ref_grads[i], 3e-2, 3e-2));
  }
}

TEST(Attention, FlashSavesNoScoreMatrix) {
  const int64_t t = 48, s = 40;
  Qkv x = make_qkv(1, 4, 2, t, s, 8, 8, DType::f32, 100);
  for (AttentionKernel kernel : kKernels) {
    auto rec = std::make_shared<Recorder>();
    Tensor out;
    {
      autograd::SavedTensorHooksGuard guard(rec);
      out = scaled_dot_product_attention(x.qh(), x.kh(), x.vh(), options(kernel, true, 0.1));
    }
    bool has_scores = false;
    int64_t bytes = 0;
    for (const Tensor& st : rec->saved) {
      has_scores = has_scores || (st.dim() >= 2 && st.size(-1) == s && st.size(-2) == t);
      bytes += st.nbytes();
    }
    if (kernel == AttentionKernel::flash) {
      EXPECT_FALSE(has_scores);
      ASSERT_EQ(rec->saved.size(), 5u);  // q, k, v, out by reference + lse (B, Hq, T) f32
      EXPECT_TRUE(rec->saved[0].is_alias_of(x.q) && rec->saved[1].is_alias_of(x.k) && rec->saved[2].is_alias_of(x.v));
      EXPECT_TRUE(rec->saved[3].is_alias_of(out));
      EXPECT_EQ(rec->saved[4].shape(), (Shape{1, 4, t}));
      EXPECT_EQ(bytes, x.q.nbytes() + x.k.nbytes() + x.v.nbytes() + out.nbytes() + 4 * t * 4);
    } else {
      // Korthikanti et al.'s list: q, k (scores GEMM), probabilities (softmax), the u8 mask (dropout),
      // dropped probabilities and v (second GEMM).
      EXPECT_TRUE(has_scores);
      ASSERT_EQ(rec->saved.size(), 6u);
      EXPECT_TRUE(rec->saved[0].is_alias_of(x.q) && rec->saved[1].is_alias_of(x.k) && rec->saved[5].is_alias_of(x.v));
      EXPECT_EQ(rec->saved[2].dtype(), DType::f32);
      EXPECT_EQ(rec->saved[3].dtype(), DType::u8);
      EXPECT_EQ(rec->saved[4].dtype(), DType::f32);
      EXPECT_EQ(bytes, x.q.nbytes() + x.k.nbytes() + x.v.nbytes() + 4 * t * s * (4 + 1 + 4));
    }
    out.backward(ones_like(out));
  }
}

TEST(Attention, MetaShapes) {
  for (AttentionKernel kernel : kKernels) {
    Tensor q = empty({2, 9, 8, 16}, DType::f32, Device::meta()).transpose(1, 2);
    Tensor k = empty({2, 11, 4, 16}, DType::f32, Device::meta()).transpose(1, 2);
    Tensor v = empty({2, 11, 4, 12}, DType::f32, Device::meta()).transpose(1, 2);
    for (Tensor* t : {&q, &k, &v}) t->set_requires_grad(true);
    Tensor out = scaled_dot_product_attention(q, k, v, options(kernel, true, 0.1));
    EXPECT_TRUE(out.is_meta());
    EXPECT_EQ(out.shape(), (Shape{2, 8, 9, 12}));
    out.backward(empty(out.shape(), DType::f32, Device::meta()));
    EXPECT_EQ(q.grad().shape(), q.shape());
    EXPECT_EQ(k.grad().shape(), k.shape());
    EXPECT_EQ(v.grad().shape(), v.shape());
  }
}

TEST(Attention, BadInputsThrow) {
  auto sdpa = [](const Shape& q, const Shape& k, const Shape& v, DType kd = DType::f32, AttentionOptions o = {}) {
    return scaled_dot_product_attention(zeros(q), zeros(k, kd), zeros(v), o);
  };
  EXPECT_THROW(sdpa({1, 3, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}), Error);              // Hq % Hkv != 0
  EXPECT_THROW(sdpa({1, 4, 4, 8}, {1, 2, 4, 8}, {1, 1, 4, 8}), Error);              // k/v heads differ
  EXPECT_THROW(sdpa({1, 4, 4, 8}, {1, 2, 4, 6}, {1, 2, 4, 8}), Error);              // head dims differ
  EXPECT_THROW(sdpa({1, 4, 4, 8}, {1, 2, 5, 8}, {1, 2, 4, 8}), Error);              // k/v lengths differ
  EXPECT_THROW(sdpa({2, 4, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}), Error);              // batch differs
  EXPECT_THROW(sdpa({4, 4, 8}, {2, 4, 8}, {2, 4, 8}), Error);                       // 3-D
  EXPECT_THROW(sdpa({1, 4, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, DType::f64), Error);  // dtypes differ
  AttentionOptions bad;
  bad.dropout_p = 1.0;
  EXPECT_THROW(sdpa({1, 4, 4, 8}, {1, 2, 4, 8}, {1, 2, 4, 8}, DType::f32, bad), Error);
  EXPECT_THROW(scaled_dot_product_attention(zeros({1, 2, 4, 8}, DType::i64), zeros({1, 2, 4, 8}, DType::i64),
                                            zeros({1, 2, 4, 8}, DType::i64)),
               Error);
}

}  // namespace tidal
