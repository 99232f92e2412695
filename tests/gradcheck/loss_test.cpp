#include <cmath>

#include "tests/support/gradcheck.h"
#include "tidal/allocator.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/loss.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"

namespace tidal {
using testing::all_close;
using testing::gradcheck;
using testing::uniform;

namespace {

// Per-row losses from existing ops: -sum(onehot * log_softmax(x)); 0 for ignored rows.
Tensor cross_entropy_rows_reference(const Tensor& x, const std::vector<int64_t>& targets, int64_t ignore) {
  const int64_t V = x.size(-1);
  std::vector<double> onehot(targets.size() * size_t(V), 0.0);
  for (size_t r = 0; r < targets.size(); ++r)
    if (targets[r] != ignore) onehot[r * size_t(V) + size_t(targets[r])] = 1.0;
  Tensor shifted = sub(x, max(x, -1, true).values);
  Tensor logp = sub(shifted, log(sum(exp(shifted), {-1}, true)));
  Shape rows = x.shape();
  rows.erase(rows.size() - 1);
  return neg(sum(mul(logp, from_vector(onehot, x.shape(), DType::f64)), {-1})).reshape(rows);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(GradcheckLoss, CrossEntropyEveryReduction) {
  Tensor x = uniform({5, 7}, 1, -3.0, 3.0);
  Tensor t = from_vector_i64({3, -100, 0, 6, 2}, Shape{5});
  for (Reduction red : {Reduction::mean, Reduction::sum, Reduction::none})
    EXPECT_TRUE(gradcheck([&](auto& in) { return cross_entropy(in[0], t, -100, red); }, {x}));
  // i32 targets, an ignore_index inside [0, V), 3-D logits.
  Tensor x3 = uniform({2, 3, 4}, 2, -2.0, 2.0);
  Tensor t3 = from_vector({1, 3, 0, 2, 1, 3}, Shape{2, 3}, DType::i32);
  EXPECT_TRUE(gradcheck([&](auto& in) { return cross_entropy(in[0], t3, 3); }, {x3}));
  EXPECT_TRUE(gradcheck([&](auto& in) { return cross_entropy(in[0], t3, -100, Reduction::none); }, {x3}));
}

TEST(GradcheckLoss, CrossEntropyStridedLogits) {
  Tensor wide = uniform({4, 9}, 3, -2.0, 2.0);
  Tensor t = from_vector_i64({0, 5, -100, 2}, Shape{4});
  // A narrow along the vocab dim keeps one row stride: read in place.
  EXPECT_TRUE(gradcheck([&](auto& in) { return cross_entropy(in[0].narrow(1, 2, 6), t); }, {wide}));
  // A transpose has no unit inner stride: copied.
  Tensor tall = uniform({6, 4}, 4, -2.0, 2.0);
  EXPECT_TRUE(gradcheck([&](auto& in) { return cross_entropy(in[0].t(), t, -100, Reduction::sum); }, {tall}));
  // (B, T, V) shifted by one position (rows of uneven spacing): copied.
  Tensor btv = uniform({2, 4, 5}, 5, -2.0, 2.0);
  Tensor t2 = from_vector_i64({1, 4, 0, 3, 2, -100}, Shape{2, 3});
  EXPECT_TRUE(gradcheck([&](auto& in) { return cross_entropy(in[0].narrow(1, 0, 3), t2); }, {btv}));
}

TEST(Loss, MatchesPyTorch) {
  // torch 1.13, f64: x = these logits (requires_grad), t = [1, -100, 4, 0];
  // l = F.cross_entropy(x, t); l.backward(); print(l.item(), x.grad); and reduction='none'.
  Tensor x = from_vector({0.5,  -1.25, 2.0,  0.0,  3.5,  //
                          1,    1,     1,    1,    1,    //
                          -2.0, 0.25,  0.75, -0.5, 1.5,  //
                          4.0,  -3.0,  0.5,  2.25, -1.0},
                         Shape{4, 5}, DType::f64);
  x.set_requires_grad(true);
  Tensor t = from_vector_i64({1, -100, 4, 0}, Shape{4});
  Tensor loss = cross_entropy(x, t);
  EXPECT_NEAR(loss.item<double>(), 1.9559833780177092, 1e-15);
  loss.backward();
  const std::vector<double> grad = {0.012651407011753298,
                                    -0.3311348484467043,
                                    0.05669967252897311,
                                    0.007673466241131764,
                                    0.2541103026648462,
                                    0,
                                    0,
                                    0,
                                    0,
                                    0,
                                    0.00523060354741304,
                                    0.0496265847225747,
                                    0.08182040582431094,
                                    0.023441938749712517,
                                    -0.1601195328440113,
                                    -0.05821983624112355,
                                    0.0002508710364790209,
                                    0.008307707756348365,
                                    0.047807557286155856,
                                    0.0018537001621403634};
  EXPECT_TRUE(all_close(x.grad(), from_vector(grad, Shape{4, 5}, DType::f64), 1e-13, 1e-16));
  Tensor rows = from_vector({5.021374555100119, 0.0, 0.6546163178603853, 0.19195926109262215}, Shape{4}, DType::f64);
  EXPECT_TRUE(all_close(cross_entropy(x.detach(), t, -100, Reduction::none), rows, 1e-14, 0));
}

TEST(Loss, ValuesMatchReferenceInEveryDtype) {
  Tensor x = uniform({3, 4, 300}, 10, -6.0, 6.0, false);
  std::vector<int64_t> tv;
  for (int64_t i = 0; i < 12; ++i) tv.push_back(i % 5 == 2 ? -100 : (i * 37) % 300);
  Tensor t = from_vector_i64(tv, Shape{3, 4});
  Tensor rows = cross_entropy_rows_reference(x, tv, -100);
  const double total = sum(rows).item<double>();
  EXPECT_TRUE(all_close(cross_entropy(x, t, -100, Reduction::none), rows, 1e-12, 1e-12));
  EXPECT_NEAR(cross_entropy(x, t, -100, Reduction::sum).item<double>(), total, 1e-10);
  EXPECT_NEAR(cross_entropy(x, t).item<double>(), total / 10.0, 1e-11);  // 10 of 12 rows count
  EXPECT_NEAR(cross_entropy(x.to(DType::f32), t).item<float>(), total / 10.0, 1e-4);
  EXPECT_NEAR(cross_entropy(x.to(DType::bf16), t).to(DType::f64).item<double>(), total / 10.0, 3e-2);
  EXPECT_EQ(cross_entropy(x.to(DType::bf16), t).dtype(), DType::f32);  // mixed precision's loss is f32
  EXPECT_EQ(cross_entropy(x.to(DType::bf16), t, -100, Reduction::none).dtype(), DType::bf16);
  EXPECT_TRUE(all_close(cross_entropy(x.to(DType::f32), t, -100, Reduction::none).to(DType::f64), rows, 1e-5, 1e-5));
  // Gradients agree across dtypes.
  auto grad = [&](DType dt) {
    Tensor xi = x.to(dt).detach().set_requires_grad(true);
    cross_entropy(xi, t).backward();
    return xi.grad().to(DType::f64);
  };
  Tensor g64 = grad(DType::f64);
  EXPECT_TRUE(all_close(grad(DType::f32), g64, 1e-5, 1e-8));
  EXPECT_TRUE(all_close(grad(DType::bf16), g64, 2e-2, 1e-4));
}

TEST(Loss, IgnoredTargets) {
  Tensor x = uniform({3, 4}, 20, -1.0, 1.0, false, DType::f32).set_requires_grad(true);
  Tensor all_ignored = from_vector_i64({-100, -100, -100}, Shape{3});
  Tensor loss = cross_entropy(x, all_ignored);
  EXPECT_TRUE(std::isnan(loss.item<float>()));  // mean over no targets, like PyTorch
  loss.backward();
  EXPECT_TRUE(all_close(x.grad(), zeros({3, 4}), 0, 0));
  EXPECT_EQ(cross_entropy(x.detach(), all_ignored, -100, Reduction::sum).item<float>(), 0.0f);
  Tensor none = cross_entropy(x.detach(), all_ignored, -100, Reduction::none);
  EXPECT_EQ(none.to_vector<float>(), (std::vector<float>{0, 0, 0}));
}

TEST(Loss, BadTargetNamesValuePositionAndVocab) {
  Tensor x = zeros({2, 3, 50});
  Tensor t = from_vector_i64({1, 2, 3, 4, 50, 5}, Shape{2, 3});
  const std::string msg = error_of([&] { cross_entropy(x, t); });
  EXPECT_NE(msg.find("target 50 "), std::string::npos) << msg;
  EXPECT_NE(msg.find("position 4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(1, 1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("50 classes"), std::string::npos) << msg;
  EXPECT_THROW(cross_entropy(x, from_vector({0, 1, -1, 0, 0, 0}, Shape{2, 3}, DType::i32)), Error);
  // -100 is an ordinary (bad) target when ignore_index is something else.
  EXPECT_THROW(cross_entropy(x, from_vector_i64({0, -100, 2, 0, 0, 0}, Shape{2, 3}), 1), Error);
  EXPECT_NO_THROW(cross_entropy(x, from_vector_i64({0, 7, 7, 0, 0, 0}, Shape{2, 3}), 7));
}

TEST(Loss, BadInputs) {
  Tensor x = zeros({4, 10});
  EXPECT_THROW(cross_entropy(x, zeros({4})), Error);                            // float targets
  EXPECT_THROW(cross_entropy(x, from_vector_i64({0, 1, 2}, Shape{3})), Error);  // wrong rows
  EXPECT_THROW(cross_entropy(x, from_vector_i64({0, 1, 2, 3}, Shape{2, 2})), Error);
  EXPECT_THROW(cross_entropy(zeros({4, 10}, DType::i64), from_vector_i64({0, 1, 2, 3}, Shape{4})), Error);
  EXPECT_THROW(cross_entropy(empty({4, 0}), from_vector_i64({0, 1, 2, 3}, Shape{4})), Error);
  EXPECT_THROW(cross_entropy(x, Tensor()), Error);
  EXPECT_THROW(cross_entropy(x, empty({4}, DType::i64, Device::meta())), Error);  // devices differ
}

TEST(Loss, NoLogitSizedTemporaries) {
  // Forward allocates only per-row vectors; backward only the gradient (plus per-row vectors).
  Allocator& cpu_alloc = device_allocator(Device::cpu());
  Tensor logits = randn({256, 1000});
  Tensor wide = randn({256, 1100}).set_requires_grad(true);
  Tensor t = randint(0, 1000, {256});
  const int64_t rows_bytes = 256 * 4;
  for (const Tensor& x : {logits.detach().set_requires_grad(true), wide.narrow(1, 50, 1000)}) {
    const int64_t base = cpu_alloc.stats().allocated;
    cpu_alloc.reset_peak_stats();
    Tensor loss = cross_entropy(x, t);
    EXPECT_LE(cpu_alloc.stats().peak_allocated - base, 3 * rows_bytes + 64);
    cpu_alloc.reset_peak_stats();
    loss.backward();
    // The narrowed view's own backward adds a gradient of the wide tensor.
    const int64_t view_grad = x.is_leaf() ? 0 : wide.nbytes();
    EXPECT_LE(cpu_alloc.stats().peak_allocated - base, logits.nbytes() + view_grad + 3 * rows_bytes + 64);
  }
}

TEST(Loss, MetaShapesAndAccounting) {
  Allocator& meta = device_allocator(Device::meta());
  const int64_t before = meta.stats().allocated;
  const auto activations = [&] { return meta.stats()[MemoryCategory::activation].allocated; };
  const int64_t act_before = activations();
  {
    Tensor logits = empty({4, 512, 50304}, DType::bf16, Device::meta()).set_requires_grad(true);
    Tensor t = empty({4, 512}, DType::i64, Device::meta());
    const int64_t base = meta.stats().allocated, rows = 4 * 512;
    meta.reset_peak_stats();
    Tensor loss = cross_entropy(logits, t);
    EXPECT_EQ(loss.dim(), 0);
    EXPECT_TRUE(loss.is_meta());
    EXPECT_LE(meta.stats().peak_allocated - base, 2 * rows * 4 + 64);                // lse + row losses (+ the scalar)
    EXPECT_EQ(activations() - act_before, logits.nbytes() + rows * 4 + t.nbytes());  // logits, lse, targets
    Tensor none = cross_entropy(logits, t, -100, Reduction::none);
    EXPECT_EQ(none.shape(), t.shape());
    EXPECT_EQ(none.dtype(), DType::bf16);
    none = Tensor();
    meta.reset_peak_stats();
    const int64_t pre_backward = meta.stats().allocated;
    loss.backward();
    EXPECT_EQ(logits.grad().shape(), logits.shape());
    EXPECT_LE(meta.stats().peak_allocated - pre_backward, logits.nbytes() + 64);
    EXPECT_EQ(activations(), act_before);
  }
  EXPECT_EQ(meta.stats().allocated, before);
}

}  // namespace tidal
