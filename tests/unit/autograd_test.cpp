#include <gtest/gtest.h>

#include "tests/support/gradcheck.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/autograd/saved_tensor.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/reduce.h"

namespace tidal {
namespace {

using autograd::SavedTensorHooks;
using autograd::SavedTensorHooksGuard;

// Counts packs and unpacks; keeps the tensor.
class CountingHooks : public SavedTensorHooks {
 public:
  int packs = 0, unpacks = 0;
  std::shared_ptr<void> pack(const Tensor& t) override {
    ++packs;
    return std::make_shared<Tensor>(t);
  }
  Tensor unpack(const std::shared_ptr<void>& p) override {
    ++unpacks;
    return *static_cast<Tensor*>(p.get());
  }
};

}  // namespace

TEST(Autograd, AccumulatesIntoLeavesAcrossBackwardCalls) {
  Tensor w = from_vector({1, 2, 3}, Shape{3}, DType::f64).set_requires_grad(true);
  sum(mul(w, w)).backward();
  sum(mul(w, 3.0)).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(w.grad().storage()->category(), MemoryCategory::gradient);
  w.zero_grad();
  EXPECT_FALSE(w.grad().defined());
}

TEST(Autograd, SecondBackwardThroughAFreedGraphThrows) {
  Tensor w = from_vector({1, 2}, Shape{2}, DType::f64).set_requires_grad(true);
  Tensor loss = sum(exp(w));
  loss.backward();
  try {
    loss.backward();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
  Tensor kept = sum(exp(w));
  w.zero_grad();
  kept.backward({}, true);
  kept.backward();
  EXPECT_TRUE(testing::all_close(w.grad(), mul(exp(w.detach()), 2.0)));
}

TEST(Autograd, InPlaceChangeOfASavedTensorIsCaught) {
  Tensor w = from_vector({1, 2}, Shape{2}, DType::f64).set_requires_grad(true);
  Tensor x = from_vector({3, 4}, Shape{2}, DType::f64);
  Tensor loss = sum(mul(w, x));  // saves x
  x.add_(x);
  EXPECT_THROW(loss.backward(), Error);
  EXPECT_THROW(w.add_(x), Error);  // in-place on a tensor that requires grad
  NoGradGuard no_grad;
  EXPECT_NO_THROW(w.add_(x));
}

TEST(Autograd, NoGradRecordsNothing) {
  Tensor w = from_vector({1, 2}, Shape{2}).set_requires_grad(true);
  NoGradGuard no_grad;
  Tensor y = exp(w);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_THROW(sum(y).backward(), Error);
}

TEST(Autograd, BadBackwardCallsThrow) {
  Tensor w = from_vector({1, 2}, Shape{2}).set_requires_grad(true);
  EXPECT_THROW(exp(w).backward(), Error);  // not a scalar
  EXPECT_THROW(exp(w).backward(zeros({3})), Error);
  EXPECT_THROW(zeros({2}, DType::i64).set_requires_grad(true), Error);
  EXPECT_THROW(exp(w).set_requires_grad(false), Error);  // not a leaf
}

TEST(Autograd, RetainGradKeepsANonLeafGradient) {
  Tensor w = from_vector({1, 2}, Shape{2}, DType::f64).set_requires_grad(true);
  Tensor y = mul(w, 3.0);
  y.retain_grad();
  sum(mul(y, y)).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{6, 12}));
}

TEST(Autograd, SavedTensorsAreReleasedRightAfterTheirBackward) {
  Allocator& dev = device_allocator(Device::cpu());
  const int64_t base = dev.stats()[MemoryCategory::activation].allocated;
  Tensor w;
  {
    MemoryScope params(MemoryCategory::parameter);
    w = full({1024}, 0.5).set_requires_grad(true);
  }
  Tensor y = exp(tanh(w));  // saves tanh's output and exp's output
  EXPECT_EQ(dev.stats()[MemoryCategory::activation].allocated - base, 2 * 4096);
  sum(y).backward();
  EXPECT_EQ(dev.stats()[MemoryCategory::activation].allocated - base, 0);
}

TEST(Autograd, SavedTensorHooksPackAndUnpackInnermostWins) {
  auto outer = std::make_shared<CountingHooks>();
  auto inner = std::make_shared<CountingHooks>();
  Tensor w = from_vector({1, 2}, Shape{2}, DType::f64).set_requires_grad(true);
  Tensor loss;
  {
    SavedTensorHooksGuard g1(outer);
    Tensor a = exp(w);  // outer: 1 pack
    {
      SavedTensorHooksGuard g2(inner);
      a = mul(a, a);  // inner: 2 packs
      {
        SavedTensorHooksGuard off(nullptr);  // hooks disabled
        a = tanh(a);
      }
    }
    loss = sum(a);
  }
  EXPECT_EQ(outer->packs, 1);
  EXPECT_EQ(inner->packs, 2);
  loss.backward();
  EXPECT_EQ(outer->unpacks, 1);
  EXPECT_EQ(inner->unpacks, 2);
  Tensor ref_w = w.detach().clone().set_requires_grad(true);
  Tensor ea = exp(ref_w);
  sum(tanh(mul(ea, ea))).backward();
  EXPECT_TRUE(testing::bitwise_equal(w.grad(), ref_w.grad()));
}

TEST(Autograd, MetaTensorsRunForwardAndBackwardWithAccounting) {
  Allocator& meta = device_allocator(Device::meta());
  const int64_t base = meta.stats().allocated;
  Tensor w, x;
  {
    MemoryScope params(MemoryCategory::parameter);
    w = empty({64, 32}, DType::f32, Device::meta()).set_requires_grad(true);
  }
  x = empty({8, 32}, DType::f32, Device::meta());
  Tensor y = tanh(linear(x, w));
  EXPECT_EQ(y.shape(), (Shape{8, 64}));
  EXPECT_EQ(meta.stats()[MemoryCategory::activation].allocated, 8 * 32 * 4 + 8 * 64 * 4);
  sum(y).backward();
  EXPECT_TRUE(w.grad().is_meta());
  EXPECT_EQ(w.grad().shape(), w.shape());
  EXPECT_EQ(meta.stats()[MemoryCategory::gradient].allocated, 64 * 32 * 4);
  w.zero_grad();
  y = Tensor();
  x = Tensor();
  w = Tensor();
  EXPECT_EQ(meta.stats().allocated, base);
}

}  // namespace tidal

namespace tidal {
TEST(BadInput, DeviceAndDtypeMismatchesNameTheOp) {
  Tensor c = zeros({2, 3});
  Tensor m = empty({2, 3}, DType::f32, Device::meta());
  try {
    add(c, m);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[add] tensors on different devices"), std::string::npos) << e.what();
  }
  EXPECT_THROW(matmul(c, m.t()), Error);
  EXPECT_THROW(mul(c, zeros({2, 3}, DType::f64)), Error);
  EXPECT_THROW(add(c, zeros({4})), Error);  // not broadcastable
  EXPECT_THROW(c.copy_(m), Error);
  EXPECT_THROW(c.to(Device::meta()).to(Device::cpu()), Error);  // a meta tensor has no data to copy
  EXPECT_THROW(sum(c, {2}), Error);
  EXPECT_THROW(c.narrow(1, 2, 2), Error);
  EXPECT_THROW(c.permute({0, 0}), Error);
  EXPECT_THROW(Tensor().shape(), Error);
}
}  // namespace tidal
