#include <cmath>

#include "tests/support/gradcheck.h"
#include "tidal/autograd/node.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/random.h"
#include "tidal/ops/rope.h"
#include "tidal/ops/view.h"

namespace tidal {
using testing::all_close;
using testing::gradcheck;
using testing::uniform;

namespace {
// x * cos + rotate_half(x) * sin from basic ops.
Tensor reference_rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  Tensor rotated = cat({neg(x.narrow(-1, half, half)), x.narrow(-1, 0, half)}, -1);
  return add(mul(x, cos), mul(rotated, sin));
}
}  // namespace

TEST(GradcheckRope, ContiguousAndTransposedInputs) {
  RopeTables tab = rope_tables(5, 6, 100.0, DType::f64);
  Tensor x = uniform({2, 3, 5, 6}, 1);
  EXPECT_TRUE(gradcheck([&](auto& t) { return apply_rope(t[0], tab.cos, tab.sin); }, {x}));
  Tensor xt = uniform({2, 5, 3, 6}, 2);  // (B, T, H, D): the projection layout
  EXPECT_TRUE(gradcheck([&](auto& t) { return apply_rope(t[0].transpose(1, 2), tab.cos, tab.sin); }, {xt}));
}

TEST(GradcheckRope, GeneralTablesUseTheAdjoint) {
  // Tables whose halves differ exercise rotate_half^T in the backward (HF tables have equal halves).
  Tensor cos = uniform({4, 8}, 3, -1, 1, false), sin = uniform({4, 8}, 4, -1, 1, false);
  Tensor x = uniform({1, 2, 4, 8}, 5);
  EXPECT_TRUE(gradcheck([&](auto& t) { return apply_rope(t[0], cos, sin); }, {x}));
  EXPECT_TRUE(all_close(apply_rope(x, cos, sin), reference_rope(x, cos, sin), 1e-12, 1e-12));
  // Strided tables and a strided head dim take the generic path.
  Tensor cos_t = uniform({8, 4}, 6, -1, 1, false).t(), xs = uniform({1, 2, 8, 4}, 7).transpose(2, 3);
  Tensor leaf = uniform({1, 2, 8, 4}, 7);
  EXPECT_TRUE(gradcheck([&](auto& t) { return apply_rope(t[0].transpose(2, 3), cos_t, sin); }, {leaf}));
  EXPECT_TRUE(all_close(apply_rope(xs, cos_t, sin), reference_rope(xs, cos_t, sin), 1e-12, 1e-12));
}

TEST(GradcheckRope, DoubleBackward) {
  RopeTables tab = rope_tables(3, 4, 10.0, DType::f64);
  Tensor x = uniform({1, 2, 3, 4}, 8), g = uniform({1, 2, 3, 4}, 9);
  // The backward is itself an op (the adjoint): check it like any other.
  Tensor y = apply_rope(x, tab.cos, tab.sin);
  std::shared_ptr<autograd::Node> node = y.grad_fn();
  EXPECT_TRUE(gradcheck([&](auto& t) { return node->apply({t[0]})[0]; }, {g}));
}

TEST(Rope, TablesMatchTheFormula) {
  const int64_t seq = 7, dim = 8;
  const double theta = 10000.0;
  RopeTables tab = rope_tables(seq, dim, theta, DType::f64);
  std::vector<double> c = tab.cos.to_vector<double>(), s = tab.sin.to_vector<double>();
  for (int64_t t = 0; t < seq; ++t)
    for (int64_t i = 0; i < dim; ++i) {
      const double angle = double(t) / std::pow(theta, double(2 * (i % (dim / 2))) / double(dim));
      EXPECT_NEAR(c[size_t(t * dim + i)], std::cos(angle), 1e-15);
      EXPECT_NEAR(s[size_t(t * dim + i)], std::sin(angle), 1e-15);
    }
  RopeTables shifted = rope_tables(3, dim, theta, DType::f32, Device::cpu(), 4);
  RopeTables full = rope_tables(seq, dim, theta, DType::f32);
  EXPECT_TRUE(testing::bitwise_equal(shifted.cos, full.cos.narrow(0, 4, 3).contiguous()));
  EXPECT_TRUE(testing::bitwise_equal(shifted.sin, full.sin.narrow(0, 4, 3).contiguous()));
}

TEST(Rope, MatchesReferenceAndKeepsMemoryOrder) {
  manual_seed(11);
  RopeTables tab = rope_tables(33, 64, 10000.0);
  Tensor proj = randn({2, 33, 4, 64});  // (B, T, H, D)
  Tensor x = proj.transpose(1, 2);      // (B, H, T, D) view
  Tensor out = apply_rope(x, tab.cos, tab.sin);
  EXPECT_EQ(out.shape(), x.shape());
  EXPECT_TRUE(out.transpose(1, 2).is_contiguous());  // (B, T, H, D) memory order, like x
  EXPECT_TRUE(all_close(out, reference_rope(x, tab.cos, tab.sin), 1e-6, 1e-6));
  EXPECT_TRUE(apply_rope(x.contiguous(), tab.cos, tab.sin).is_contiguous());
  // bf16 computes in f32 and rounds once.
  RopeTables tb = rope_tables(33, 64, 10000.0, DType::bf16);
  Tensor xb = x.to(DType::bf16);
  EXPECT_TRUE(all_close(apply_rope(xb, tb.cos, tb.sin).to(DType::f32),
                        reference_rope(xb.to(DType::f32), tb.cos.to(DType::f32), tb.sin.to(DType::f32)), 1e-2, 1e-2));
}

TEST(Rope, MetaShapes) {
  RopeTables tab = rope_tables(16, 8, 10000.0, DType::f32, Device::meta());
  EXPECT_TRUE(tab.cos.is_meta());
  EXPECT_EQ(tab.sin.shape(), (Shape{16, 8}));
  Tensor x = empty({2, 16, 3, 8}, DType::f32, Device::meta()).transpose(1, 2);
  x.set_requires_grad(true);
  Tensor out = apply_rope(x, tab.cos, tab.sin);
  EXPECT_TRUE(out.is_meta());
  EXPECT_EQ(out.shape(), (Shape{2, 3, 16, 8}));
  out.backward(empty(out.shape(), DType::f32, Device::meta()));
  EXPECT_EQ(x.grad().shape(), x.shape());
}

TEST(Rope, BadInputsThrow) {
  RopeTables tab = rope_tables(4, 6, 10000.0);
  EXPECT_THROW(rope_tables(4, 5, 10000.0), Error);
  EXPECT_THROW(rope_tables(4, 6, -1.0), Error);
  EXPECT_THROW(rope_tables(4, 6, 10000.0, DType::i64), Error);
  EXPECT_THROW(apply_rope(zeros({2, 4, 6}), tab.cos, tab.sin), Error);                 // not 4-D
  EXPECT_THROW(apply_rope(zeros({1, 2, 5, 6}), tab.cos, tab.sin), Error);              // T differs
  EXPECT_THROW(apply_rope(zeros({1, 2, 4, 6}, DType::f64), tab.cos, tab.sin), Error);  // dtype
  EXPECT_THROW(apply_rope(zeros({1, 2, 4, 5}), zeros({4, 5}), zeros({4, 5})), Error);  // odd D
  EXPECT_THROW(apply_rope(zeros({1, 2, 4, 6}, DType::i64), tab.cos, tab.sin), Error);
}

}  // namespace tidal
