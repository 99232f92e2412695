// chunked_lm_loss: f64 gradchecks for hidden and weight (with ignored rows, chunks that do not
// divide the rows, an incoming gradient != 1), equality with linear + cross_entropy, the logits
// buffer on the allocator, meta accounting, bf16, no-grad use, and bad inputs.
#include <cmath>

#include "tests/support/error_of.h"
#include "tests/support/gradcheck.h"
#include "tidal/allocator.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/ops/chunked_loss.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"

namespace tidal {
using testing::all_close;
using testing::bitwise_equal;
using testing::error_of;
using testing::gradcheck;
using testing::uniform;

namespace {

// Equal within 1e-6 relative to the largest magnitude: what a different order of additions gives
// (oneDNN's GEMM takes other paths for another number of rows M; the weight's gradient is summed
// chunk by chunk). Elementwise-relative would fail on elements that cancel to near 0.
::testing::AssertionResult close(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (double v : b.to_vector<double>()) m = std::max(m, std::abs(v));
  return all_close(a, b, 1e-6, 1e-6 * m);
}

struct Grads {
  Tensor loss, gh, gw;
};

// Loss and both gradients, either path, after backward from `scale` * loss.
Grads run(const Tensor& h0, const Tensor& w0, const Tensor& t, int64_t chunk, double scale = 1.0) {
  Tensor h = h0.detach().clone().set_requires_grad(true);
  Tensor w = w0.detach().clone().set_requires_grad(true);
  Tensor loss = chunk > 0 ? chunked_lm_loss(h, w, t, chunk)
                          : cross_entropy(linear(h, w).reshape({-1, w.size(0)}), t.reshape({-1}));
  (scale == 1.0 ? loss : mul(loss, scale)).backward();
  return {loss.detach(), h.grad(), w.grad()};
}

}  // namespace

TEST(GradcheckChunkedLoss, HiddenAndWeight) {
  Tensor h = uniform({7, 5}, 1, -1.5, 1.5);
  Tensor w = uniform({11, 5}, 2, -1.5, 1.5);
  Tensor t = from_vector_i64({3, -100, 0, 10, 7, -100, 2}, Shape{7});
  for (int64_t chunk : {1, 3, 7, 100})  // one row, uneven chunks, exactly N, more than N
    EXPECT_TRUE(gradcheck([&](auto& in) { return chunked_lm_loss(in[0], in[1], t, chunk); }, {h, w})) << chunk;
  // (B, T, C) hidden, i32 targets, only one input requiring grad.
  Tensor h3 = uniform({2, 3, 4}, 3, -1.0, 1.0);
  Tensor w3 = uniform({6, 4}, 4, -1.0, 1.0, /*requires_grad=*/false);
  Tensor t3 = from_vector({1, 5, 0, 2, -100, 3}, Shape{2, 3}, DType::i32);
  EXPECT_TRUE(gradcheck([&](auto& in) { return chunked_lm_loss(in[0], w3, t3, 4); }, {h3}));
  Tensor h3c = uniform({2, 3, 4}, 5, -1.0, 1.0, false);
  Tensor w3g = uniform({6, 4}, 6, -1.0, 1.0);
  EXPECT_TRUE(gradcheck([&](auto& in) { return chunked_lm_loss(h3c, in[0], t3, 2); }, {w3g}));
}

TEST(ChunkedLoss, EqualsLinearPlusCrossEntropy) {
  manual_seed(3);
  Tensor h = randn({2, 9, 16}), w = mul(randn({40, 16}), 0.3);
  Tensor t = randint(0, 40, {2, 9});
  t.narrow(1, 4, 2).fill_(-100);
  const Grads ref = run(h, w, t, 0);
  // With one chunk (>= N rows) every GEMM call is the unchunked path's own and the row losses are
  // summed in the same order over the same count: loss and gradients are bitwise identical. With
  // smaller chunks the GEMMs see fewer rows (oneDNN rounds some rows differently then) and the
  // weight's gradient is summed chunk by chunk: equal within 1e-6 relative.
  for (int64_t chunk : {1, 4, 5, 18, 64}) {
    const Grads g = run(h, w, t, chunk);
    if (chunk >= 18) {
      EXPECT_TRUE(bitwise_equal(g.loss, ref.loss)) << chunk;
      EXPECT_TRUE(bitwise_equal(g.gh, ref.gh)) << chunk;
      EXPECT_TRUE(bitwise_equal(g.gw, ref.gw)) << chunk;
    } else {
      EXPECT_TRUE(close(g.loss, ref.loss)) << chunk;
      EXPECT_TRUE(close(g.gh, ref.gh)) << chunk;
      EXPECT_TRUE(close(g.gw, ref.gw)) << chunk;
    }
  }
  // An incoming gradient != 1 scales the stored gradients (0.5 is exact, 0.3 is not).
  for (double s : {0.5, 0.3}) {
    const Grads r = run(h, w, t, 0, s), g = run(h, w, t, 5, s);
    EXPECT_TRUE(close(g.gh, r.gh)) << s;
    EXPECT_TRUE(close(g.gw, r.gw)) << s;
  }
}

TEST(ChunkedLoss, AllIgnoredIsNaNWithZeroGradients) {
  Tensor h = uniform({3, 4}, 7, -1.0, 1.0, false, DType::f32), w = uniform({5, 4}, 8, -1.0, 1.0, false, DType::f32);
  Tensor t = full({3}, -100, DType::i64);
  const Grads g = run(h, w, t, 2);
  EXPECT_TRUE(std::isnan(g.loss.item<double>()));
  EXPECT_TRUE(bitwise_equal(g.gh, zeros({3, 4})));
  EXPECT_TRUE(bitwise_equal(g.gw, zeros({5, 4})));
  EXPECT_TRUE(std::isnan(cross_entropy(linear(h, w), t).item<double>()));  // the same convention
}

TEST(ChunkedLoss, OnlyOneChunkOfLogitsExists) {
  Allocator& dev = device_allocator(Device::cpu());
  manual_seed(4);
  const int64_t N = 64, C = 8, V = 300;
  Tensor h = randn({N, C}).set_requires_grad(true), w = randn({V, C}).set_requires_grad(true);
  Tensor t = randint(0, V, {N});
  for (int64_t chunk : {16, 24, 64, 1000}) {
    dev.reset_peak_stats();
    const int64_t before = dev.stats()[MemoryCategory::logits].allocated;
    Tensor loss = chunked_lm_loss(h, w, t, chunk);
    // What backward needs is saved: the two gradients, as activations; no logits are left.
    EXPECT_EQ(dev.stats()[MemoryCategory::logits].allocated, before);
    loss.backward();
    EXPECT_EQ(dev.stats()[MemoryCategory::logits].peak - before, std::min(chunk, N) * V * 4) << chunk;
    h.zero_grad();
    w.zero_grad();
  }
}

TEST(ChunkedLoss, MetaAccountsLikeARealRun) {
  const int64_t N = 24, C = 8, V = 50, chunk = 10;
  auto measure = [&](Device d) {
    Allocator& a = device_allocator(d);
    Tensor h = zeros({2, 12, C}, DType::f32, d).set_requires_grad(true);
    Tensor w = zeros({V, C}, DType::f32, d).set_requires_grad(true);
    Tensor t = zeros({2, 12}, DType::i64, d);
    a.reset_peak_stats();
    const MemoryStats s0 = a.stats();
    Tensor loss = chunked_lm_loss(h, w, t, chunk);
    EXPECT_EQ(loss.shape(), Shape{});
    const MemoryStats s1 = a.stats();
    loss.backward();
    EXPECT_EQ(h.grad().shape(), h.shape());
    EXPECT_EQ(w.grad().shape(), w.shape());
    const MemoryStats s2 = a.stats();
    return std::vector<int64_t>{s1[MemoryCategory::activation].allocated - s0[MemoryCategory::activation].allocated,
                                s2[MemoryCategory::logits].peak, s2.peak_allocated - s0.allocated,
                                s2[MemoryCategory::gradient].allocated - s0[MemoryCategory::gradient].allocated};
  };
  const std::vector<int64_t> real = measure(Device::cpu()), meta = measure(Device::meta());
  EXPECT_EQ(meta, real);
  EXPECT_EQ(meta[0], N * C * 4 + V * C * 4);  // the stored gradients are activations until backward
  EXPECT_EQ(meta[1], chunk * V * 4);
  EXPECT_EQ(meta[3], N * C * 4 + V * C * 4);  // handed to both leaves as their .grad without a copy
}

TEST(ChunkedLoss, Bf16RunsInF32) {
  manual_seed(5);
  Tensor h = randn({12, 8}).to(DType::bf16), w = mul(randn({30, 8}), 0.5).to(DType::bf16);
  Tensor t = randint(0, 30, {12});
  const Grads g16 = run(h, w, t, 5);
  const Grads g32 = run(h.to(DType::f32), w.to(DType::f32), t, 5);
  EXPECT_EQ(g16.loss.dtype(), DType::f32);  // the loss of mixed precision is f32
  EXPECT_EQ(g16.gh.dtype(), DType::bf16);
  EXPECT_EQ(g16.gw.dtype(), DType::bf16);
  // The same f32 computation on the same (bf16-representable) values; the gradients rounded to bf16 at the end.
  EXPECT_TRUE(bitwise_equal(g16.loss, g32.loss));
  EXPECT_TRUE(bitwise_equal(g16.gh, g32.gh.to(DType::bf16)));
  EXPECT_TRUE(bitwise_equal(g16.gw, g32.gw.to(DType::bf16)));
}

TEST(ChunkedLoss, WithoutGradItOnlyComputesTheLoss) {
  manual_seed(6);
  Tensor h = randn({10, 4}).set_requires_grad(true), w = randn({9, 4});
  Tensor t = randint(0, 9, {10});
  Allocator& dev = device_allocator(Device::cpu());
  const int64_t act = dev.stats()[MemoryCategory::activation].allocated;
  NoGradGuard no_grad;
  Tensor loss = chunked_lm_loss(h, w, t, 3);
  EXPECT_FALSE(loss.requires_grad());
  EXPECT_EQ(dev.stats()[MemoryCategory::activation].allocated, act);
  EXPECT_TRUE(bitwise_equal(loss, cross_entropy(linear(h, w), t)));
}

TEST(ChunkedLoss, BadInputsAreNamed) {
  Tensor h = zeros({4, 3}), w = zeros({5, 3}), t = zeros({4}, DType::i64);
  EXPECT_NE(error_of([&] { chunked_lm_loss(h, zeros({5}), t, 2); }).find("(V, C)"), std::string::npos);
  EXPECT_NE(error_of([&] { chunked_lm_loss(h, zeros({5, 4}), t, 2); }).find("C = 4"), std::string::npos);
  EXPECT_NE(error_of([&] { chunked_lm_loss(h, w, zeros({3}, DType::i64), 2); }).find("leading shape"),
            std::string::npos);
  EXPECT_NE(error_of([&] { chunked_lm_loss(h, w, zeros({4}), 2); }).find("class indices"), std::string::npos);
  EXPECT_NE(error_of([&] { chunked_lm_loss(h, w, t, 0); }).find("chunk_size must be >= 1"), std::string::npos);
  EXPECT_NE(error_of([&] { chunked_lm_loss(h, w.to(DType::f64), t, 2); }).find("dtype mismatch"), std::string::npos);
  const std::string bad = error_of([&] { chunked_lm_loss(h, w, from_vector_i64({0, 1, 5, 2}, Shape{4}), 2); });
  EXPECT_NE(bad.find("target 5 at position 2"), std::string::npos) << bad;
  EXPECT_NE(bad.find("5 classes"), std::string::npos) << bad;
}

}  // namespace tidal
