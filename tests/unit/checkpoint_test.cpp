#include <gtest/gtest.h>

#include "tests/support/gradcheck.h"
#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/memory_scope.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"

namespace tidal {
namespace {

using autograd::checkpoint;
using testing::bitwise_equal;

struct Mlp {
  Tensor w1, b1, w2, b2;
  double p = 0.1;
  explicit Mlp(int64_t c, int64_t h, int64_t o) {
    MemoryScope params(MemoryCategory::parameter);
    manual_seed(7);
    w1 = mul(randn({h, c}), 0.2).set_requires_grad(true);
    b1 = mul(randn({h}), 0.1).set_requires_grad(true);
    w2 = mul(randn({o, h}), 0.2).set_requires_grad(true);
    b2 = mul(randn({o}), 0.1).set_requires_grad(true);
  }
  // (N, C) -> (N, O): saves x, tanh output, dropout mask, dropout output.
  Tensor operator()(const Tensor& x) const { return linear(dropout(tanh(linear(x, w1, b1)), p), w2, b2); }
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  void zero_grad() const {
    for (const Tensor& t : params()) t.zero_grad();
  }
};

int64_t activation_bytes() { return device_allocator(Device::cpu()).stats()[MemoryCategory::activation].allocated; }

}  // namespace

TEST(Checkpoint, GradientsAreBitwiseIdenticalWithDropout) {
  Mlp mlp(32, 64, 16);
  manual_seed(1);
  Tensor x = randn({8, 32}).set_requires_grad(true);

  manual_seed(100);
  sum(square(mlp(x))).backward();
  std::vector<Tensor> plain;
  for (const Tensor& t : mlp.params()) plain.push_back(t.grad());
  Tensor plain_x = x.grad();
  mlp.zero_grad();
  x.zero_grad();

  manual_seed(100);
  const int64_t replays = autograd::checkpoint_replay_count();
  sum(square(checkpoint(mlp, x))).backward();
  EXPECT_EQ(autograd::checkpoint_replay_count(), replays + 1);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(bitwise_equal(mlp.params()[i].grad(), plain[i])) << i;
  EXPECT_TRUE(bitwise_equal(x.grad(), plain_x));
}

TEST(Checkpoint, KeepsOnlyTheInputs) {
  const int64_t n = 64, c = 32, h = 128, o = 16;
  Mlp mlp(c, h, o);
  manual_seed(2);
  Tensor x = randn({n, c}).set_requires_grad(true);
  const int64_t base = activation_bytes();

  Tensor y = mlp(x);
  const int64_t plain = activation_bytes() - base;
  // x (f32), tanh output (f32), dropout mask (u8), dropout output (f32).
  EXPECT_EQ(plain, n * c * 4 + n * h * 4 + n * h * 1 + n * h * 4);
  y = Tensor();
  EXPECT_EQ(activation_bytes(), base);  // dropping the graph frees every saved tensor

  Tensor yc = checkpoint(mlp, x);
  EXPECT_EQ(activation_bytes() - base, n * c * 4);  // only the region's input
  sum(yc).backward();
  EXPECT_EQ(activation_bytes(), base);  // recomputed activations were freed by their consumers
}

TEST(Checkpoint, NestedRegionsAndSecondBackward) {
  Mlp inner(16, 16, 16);
  inner.p = 0.0;
  manual_seed(3);
  Tensor x = randn({4, 16}).set_requires_grad(true);
  auto body = [&](const Tensor& t) { return inner(checkpoint([&](const Tensor& u) { return inner(u); }, t)); };
  Tensor plain = sum(body(x));
  plain.backward();
  Tensor gx = x.grad();
  x.zero_grad();
  Tensor ck = sum(checkpoint(body, x));
  EXPECT_TRUE(bitwise_equal(ck, plain));
  ck.backward({}, /*retain_graph=*/true);
  EXPECT_TRUE(bitwise_equal(x.grad(), gx));
  ck.backward();  // replays again: the first backward consumed the recomputed tensors
  EXPECT_TRUE(bitwise_equal(x.grad(), mul(gx, 2.0)));
}

TEST(Checkpoint, DetectsAFunctionThatChangesOnReplay) {
  Tensor x = testing::uniform({3}, 1);
  int calls = 0;
  Tensor y = checkpoint(
      [&](const Tensor& t) {
        ++calls;
        return calls == 1 ? exp(t) : t * 2.0;  // the replay saves nothing
      },
      x);
  EXPECT_THROW(sum(y).backward(), Error);
}

// The replay stops at its last save: a region ending in a product (its inputs saved before it is
// computed) does not compute that product again; what follows it in fn does not run either.
TEST(Checkpoint, ReplayStopsEarlyAtItsLastSave) {
  manual_seed(5);
  Tensor w = randn({8, 8}).set_requires_grad(true);
  Tensor x = randn({4, 8}).set_requires_grad(true);
  int finished = 0;
  auto fn = [&](const Tensor& t) {
    Tensor y = matmul(tanh(t), w);  // saves tanh's output, then matmul's two inputs
    ++finished;                     // reached only when the product was computed
    return y;
  };
  Tensor plain = sum(fn(x));
  plain.backward();
  Tensor gx = x.grad(), gw = w.grad();
  x.zero_grad();
  w.zero_grad();
  finished = 0;
  const int64_t replays = autograd::checkpoint_replay_count();
  sum(checkpoint(fn, x)).backward();
  EXPECT_EQ(autograd::checkpoint_replay_count(), replays + 1);
  EXPECT_EQ(finished, 1);  // the first run only: the replay stopped before the product
  EXPECT_TRUE(bitwise_equal(x.grad(), gx));
  EXPECT_TRUE(bitwise_equal(w.grad(), gw));
}

TEST(Checkpoint, NoGradModeJustRuns) {
  Tensor x = testing::uniform({3}, 1);
  NoGradGuard no_grad;
  Tensor y = checkpoint([](const Tensor& t) { return exp(t); }, x);
  EXPECT_FALSE(y.requires_grad());
}

}  // namespace tidal
