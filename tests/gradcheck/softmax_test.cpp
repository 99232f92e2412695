#include <cmath>
#include <limits>

#include "tests/support/gradcheck.h"
#include "tidal/allocator.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/softmax.h"

namespace tidal {
using testing::all_close;
using testing::gradcheck;
using testing::uniform;

namespace {

// Reference (log_)softmax from existing ops, max-subtracted.
Tensor softmax_reference(const Tensor& x, int64_t dim, bool log) {
  Tensor shifted = sub(x, max(x, dim, true).values);
  Tensor lse = tidal::log(sum(exp(shifted), {dim}, true));
  return log ? sub(shifted, lse) : exp(sub(shifted, lse));
}

// d/dx of sum(op(x) * w) in f64, for x converted to `dtype`.
Tensor softmax_grad(const Tensor& x, int64_t dim, bool log, DType dtype) {
  Tensor xi = x.detach().to(dtype).set_requires_grad(true);
  Tensor y = log ? log_softmax(xi, dim) : softmax(xi, dim);
  sum(mul(y.to(DType::f64), uniform(y.shape(), 5, -1.0, 1.0, false))).backward();
  return xi.grad().to(DType::f64);
}

}  // namespace

TEST(GradcheckSoftmax, EveryDimAndLayout) {
  Tensor x = uniform({2, 3, 4}, 1, -3.0, 3.0);
  for (bool log : {false, true}) {
    auto op = [log](const Tensor& t, int64_t dim) { return log ? log_softmax(t, dim) : softmax(t, dim); };
    for (int64_t dim : {-1, 0, 1}) EXPECT_TRUE(gradcheck([&](auto& in) { return op(in[0], dim); }, {x}));
    EXPECT_TRUE(gradcheck([&](auto& in) { return op(in[0].transpose(0, 2), -1); }, {x}));  // strided input
    EXPECT_TRUE(gradcheck([&](auto& in) { return op(in[0].transpose(1, 2), 1); }, {x}));
    EXPECT_TRUE(gradcheck([&](auto& in) { return op(in[0], 0); }, {uniform({5}, 2)}));
  }
}

TEST(Softmax, ValuesMatchReference) {
  Tensor x = uniform({3, 70, 5}, 10, -8.0, 8.0, false);  // 70: more than a vector of rows
  for (bool log : {false, true}) {
    auto op = [log](const Tensor& t, int64_t dim) { return log ? log_softmax(t, dim) : softmax(t, dim); };
    for (int64_t dim : {-1, 1, 0}) {
      Tensor ref = softmax_reference(x, dim, log);
      SCOPED_TRACE(::testing::Message() << "log " << log << " dim " << dim);
      EXPECT_TRUE(all_close(op(x, dim), ref, 1e-12, 1e-14));
      EXPECT_TRUE(all_close(op(x.to(DType::f32), dim).to(DType::f64), ref, 1e-5, 1e-6));
      EXPECT_TRUE(all_close(op(x.to(DType::bf16), dim).to(DType::f64), ref, 2e-2, 1e-2));
      for (DType dt : {DType::f32, DType::bf16}) {
        const double tol = dt == DType::f32 ? 1e-5 : 5e-2;
        EXPECT_TRUE(all_close(softmax_grad(x, dim, log, dt), softmax_grad(x, dim, log, DType::f64), tol, tol)) << dt;
      }
    }
  }
  // Rows sum to one; softmax of a 0-dim tensor is 1.
  EXPECT_TRUE(all_close(sum(softmax(x, 1), {1}), ones({3, 5}, DType::f64), 1e-12, 1e-12));
  EXPECT_EQ(softmax(scalar_tensor(4.0)).item<float>(), 1.0f);
}

TEST(Softmax, StableForLargeAndInfiniteLogits) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor big = from_vector({1000, 1001, 1002, -1000}, Shape{1, 4});
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  const double lz = std::log(z);
  Tensor want = from_vector({1 / z, std::exp(1.0) / z, std::exp(2.0) / z, 0}, Shape{1, 4});
  EXPECT_TRUE(all_close(softmax(big), want, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(log_softmax(big), from_vector({-lz, 1 - lz, 2 - lz, -2000 - lz}, Shape{1, 4}), 1e-6, 1e-4));
  // Masked (-inf) entries get probability 0, as in attention masks.
  Tensor masked = from_vector({0.5, -inf, 0.5, -inf}, Shape{2, 2});
  EXPECT_EQ(softmax(masked).to_vector<float>(), (std::vector<float>{1, 0, 1, 0}));
  Tensor masked_cols = from_vector({0.5, -inf, 0.5, 1.0}, Shape{2, 2});
  EXPECT_EQ(softmax(masked_cols, 0).to_vector<float>(), (std::vector<float>{0.5, 0, 0.5, 1}));
  // A fully masked row has no distribution: NaN, like PyTorch.
  EXPECT_TRUE(std::isnan(softmax(from_vector({-inf, -inf}, Shape{2})).to_vector<float>()[0]));
}

TEST(Softmax, MetaSavesOutputOnly) {
  Allocator& meta = device_allocator(Device::meta());
  const int64_t before = meta.stats().allocated;
  const auto activations = [&] { return meta.stats()[MemoryCategory::activation].allocated; };
  const int64_t act_before = activations();
  {
    Tensor x = empty({8, 12, 128, 128}, DType::bf16, Device::meta()).set_requires_grad(true);
    const int64_t base = meta.stats().allocated;
    Tensor y = softmax(x, -1);
    Tensor z = log_softmax(x, 2);
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_EQ(z.shape(), x.shape());
    EXPECT_TRUE(y.is_meta());
    EXPECT_EQ(meta.stats().allocated - base, 2 * x.nbytes());
    EXPECT_EQ(activations() - act_before, 2 * x.nbytes());  // the outputs, not x
    add(y, z).backward(ones(x.shape(), DType::bf16, Device::meta()));
    EXPECT_EQ(x.grad().shape(), x.shape());
    EXPECT_EQ(activations(), act_before);
  }
  EXPECT_EQ(meta.stats().allocated, before);
}

TEST(Softmax, BadInputs) {
  EXPECT_THROW(softmax(zeros({2, 3}, DType::i64)), Error);
  EXPECT_THROW(log_softmax(zeros({2, 3}), 2), Error);
  EXPECT_THROW(softmax(zeros({2, 3}), -3), Error);
  EXPECT_THROW(softmax(scalar_tensor(1.0), 1), Error);
  EXPECT_THROW(softmax(Tensor()), Error);
}

}  // namespace tidal
