#include <gtest/gtest.h>

#include "tests/support/gradcheck.h"
#include "tidal/autograd/checkpoint_without_output.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/activation.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal::autograd {
namespace {

struct Net {
  Tensor w1, w2;
  Net() {
    MemoryScope params(MemoryCategory::parameter);
    manual_seed(4);
    w1 = mul(randn({96, 32}), 0.2).set_requires_grad(true);
    w2 = mul(randn({16, 96}), 0.2).set_requires_grad(true);
  }
};

int64_t activation_bytes() { return device_allocator(Device::cpu()).stats()[MemoryCategory::activation].allocated; }

}  // namespace

TEST(CheckpointWithoutOutput, SameGradientsLessMemory) {
  Net net;
  manual_seed(1);
  Tensor x = randn({64, 32}).set_requires_grad(true);
  // Plain: linear saves x, gelu saves its input h, the second linear saves gelu's output a.
  const int64_t base = activation_bytes();
  Tensor y = linear(gelu(linear(x, net.w1)), net.w2);
  const int64_t plain_bytes = activation_bytes() - base;
  EXPECT_EQ(plain_bytes, 64 * 32 * 4 + 2 * 64 * 96 * 4);
  sum(square(y)).backward();
  std::vector<Tensor> plain = {x.grad(), net.w1.grad(), net.w2.grad()};
  for (Tensor t : {x, net.w1, net.w2}) t.zero_grad();

  const int64_t before = output_recompute_count();
  CheckpointWithoutOutput ck;
  Tensor h = linear(x, net.w1);
  Tensor a = ck.run([](const Tensor& t) { return gelu(t); }, h);
  Tensor y2 = linear(a, net.w2);
  std::shared_ptr<Storage> a_storage = a.storage();
  ck.discard_outputs();
  ck.recompute_before_backward_of(y2);
  EXPECT_FALSE(a_storage->is_materialized());
  EXPECT_EQ(activation_bytes() - base, plain_bytes - 64 * 96 * 4);  // gelu's output is gone
  sum(square(y2)).backward();
  EXPECT_EQ(output_recompute_count(), before + 1);
  EXPECT_TRUE(testing::bitwise_equal(x.grad(), plain[0]));
  EXPECT_TRUE(testing::bitwise_equal(net.w1.grad(), plain[1]));
  EXPECT_TRUE(testing::bitwise_equal(net.w2.grad(), plain[2]));
  a = Tensor();
  h = Tensor();
  EXPECT_EQ(activation_bytes(), base);
}

TEST(CheckpointWithoutOutput, ReplaysDropoutAndServesSeveralConsumers) {
  Net net;
  manual_seed(2);
  Tensor x = randn({8, 32}).set_requires_grad(true);
  auto fn = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{dropout(tanh(in[0]), 0.3)}; };
  manual_seed(7);
  Tensor a = fn({linear(x, net.w1)})[0];
  Tensor y = add(linear(a, net.w2), linear(a, net.w2));
  sum(square(y)).backward();
  std::vector<Tensor> plain = {x.grad(), net.w1.grad(), net.w2.grad()};
  for (Tensor t : {x, net.w1, net.w2}) t.zero_grad();

  manual_seed(7);
  std::vector<Tensor> outs = with_discarded_outputs(true, fn, {linear(x, net.w1)}, [&](const std::vector<Tensor>& o) {
    return std::vector<Tensor>{linear(o[0], net.w2), linear(o[0], net.w2)};
  });
  sum(square(add(outs[0], outs[1]))).backward();
  EXPECT_TRUE(testing::bitwise_equal(x.grad(), plain[0]));
  EXPECT_TRUE(testing::bitwise_equal(net.w1.grad(), plain[1]));
  EXPECT_TRUE(testing::bitwise_equal(net.w2.grad(), plain[2]));
}

TEST(CheckpointWithoutOutput, RunsOncePerObject) {
  CheckpointWithoutOutput ck;
  Tensor x = testing::uniform({3}, 1);
  ck.run([](const Tensor& t) { return exp(t); }, x);
  EXPECT_THROW(ck.run([](const Tensor& t) { return exp(t); }, x), Error);
}

}  // namespace tidal::autograd
