// The gradient checker must catch a wrong backward; otherwise every gradcheck test is worthless.
#include "tests/support/gradcheck.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/ops/common.h"
#include "tidal/ops/elementwise.h"

namespace tidal {
namespace {

// y = x^2 with a deliberately wrong backward (x instead of 2x).
struct WrongSquareBackward : autograd::Node {
  autograd::SavedTensor x;
  const char* name() const override { return "WrongSquareBackward"; }
  autograd::TensorList apply(autograd::TensorList&& g) override { return {mul(g[0], x.unpack(name()))}; }
  void release_saved() override { x.reset(); }
};

Tensor wrong_square(const Tensor& x) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = mul(x, x);
  }
  if (autograd::needs_grad(x)) {
    auto node = autograd::make_node<WrongSquareBackward>({&x});
    node->x = autograd::SavedTensor(x);
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace

TEST(GradcheckSelfTest, CatchesAWrongBackward) {
  Tensor x = testing::uniform({3, 2}, 1, 0.5, 1.5);
  ::testing::AssertionResult r = testing::gradcheck([](auto& t) { return wrong_square(t[0]); }, {x});
  EXPECT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("worst element"), std::string::npos) << r.message();
  EXPECT_TRUE(testing::gradcheck([](auto& t) { return mul(t[0], t[0]); }, {x}));
}

}  // namespace tidal
