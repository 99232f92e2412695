// A LoRA-adapted linear layer (nn::Adaptable): its output is x W^T + b + scaling (x A^T) B^T, and its
// gradients for x, A and B pass f64 finite differences, the frozen base weight getting none.
#include <gtest/gtest.h>

#include "tests/support/gradcheck.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/nn/layers.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"

namespace tidal {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::uniform;

nn::Init f64_init() {
  nn::Init init;
  init.dtype = DType::f64;
  return init;
}

// The adapter's halves (A (r, in), B (out, r)) of a module, in registration order after the base's.
std::pair<Tensor, Tensor> halves(const nn::Module& m) {
  Tensor a, b;
  for (const auto& [name, p] : m.named_parameters()) {
    if (name == "lora_A.weight") a = p;
    if (name == "lora_B.weight") b = p;
  }
  return {a, b};
}

TEST(LoraGradcheck, LinearOutputAndGradients) {
  nn::Linear lin(5, 3, /*bias=*/true, f64_init());
  lin.add_lora(2, 1.5, 0.0, f64_init());
  auto [a, b] = halves(lin);
  ASSERT_TRUE(a.defined() && b.defined());
  EXPECT_EQ(a.shape(), (Shape{2, 5}));
  EXPECT_EQ(b.shape(), (Shape{3, 2}));
  {  // B starts at zero (PEFT): the adapted layer is the base layer
    NoGradGuard no_grad;
    const Tensor x = uniform({4, 5}, 1, -1, 1, false);
    EXPECT_TRUE(testing::bitwise_equal(lin.forward(x), linear(x, lin.weight(), Tensor())));
    b.copy_(uniform({3, 2}, 2, -1, 1, false));
  }
  for (auto& [name, p] : lin.named_parameters())
    if (name == "weight" || name == "bias") p.set_requires_grad(false);  // the base, frozen as apply_lora does
  const Tensor x = uniform({2, 4, 5}, 3);
  {
    NoGradGuard no_grad;
    Tensor bias;
    for (const auto& [name, p] : lin.named_parameters())
      if (name == "bias") bias = p;
    const Tensor want = add(linear(x, lin.weight(), bias), matmul(matmul(x, a.t()), b.t()), 1.5);
    EXPECT_TRUE(all_close(lin.forward(x), want, 1e-12, 1e-12));
  }
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return lin.forward(in[0]); }, {x, a, b}));
  EXPECT_FALSE(lin.weight().grad().defined());
}

TEST(LoraGradcheck, Conv1DOutputAndGradients) {
  nn::Conv1D conv(4, 6, f64_init());
  conv.add_lora(3, 0.5, 0.0, f64_init());
  auto [a, b] = halves(conv);
  {
    NoGradGuard no_grad;
    b.copy_(uniform({6, 3}, 4, -1, 1, false));
  }
  Tensor w;
  for (auto& [name, p] : conv.named_parameters())
    if (name == "weight" || name == "bias") {
      p.set_requires_grad(false);
      if (name == "weight") w = p;
    }
  const Tensor x = uniform({3, 4}, 5);
  {
    NoGradGuard no_grad;  // merged_weight: W (in, out) + scaling (B A)^T gives the same output
    const Tensor merged = conv.merged_weight();
    Tensor bias;
    for (const auto& [name, p] : conv.named_parameters())
      if (name == "bias") bias = p;
    EXPECT_TRUE(all_close(conv.forward(x), linear(x, merged.t(), bias), 1e-12, 1e-12));
  }
  EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return conv.forward(in[0]); }, {x, a, b}));
  EXPECT_FALSE(w.grad().defined());
}

}  // namespace
}  // namespace tidal
