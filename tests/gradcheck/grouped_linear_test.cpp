// grouped_linear (ops/grouped_linear.h): f64 gradchecks, the same rows as one linear per group in f32 and bf16,
// groups of no rows, and the errors a caller can make.
#include "tidal/ops/grouped_linear.h"

#include <string>
#include <vector>

#include "tests/support/gradcheck.h"
#include "tidal/base/error.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/matmul.h"
#include "tidal/ops/random.h"
#include "tidal/ops/reduce.h"
#include "tidal/ops/view.h"

namespace tidal {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::uniform;

TEST(GradcheckGroupedLinear, RowsWeightsAndAnEmptyGroup) {
  // Groups of 2, 0, 3 and 1 rows of 4 features into 5: the empty group's weight takes no part.
  Tensor x = uniform({6, 4}, 1), w0 = uniform({5, 4}, 2), w2 = uniform({5, 4}, 3), w3 = uniform({5, 4}, 4);
  const Tensor unused = uniform({5, 4}, 5, -1.0, 1.0, false);
  const std::vector<int64_t> counts = {2, 0, 3, 1};
  EXPECT_TRUE(gradcheck(
      [&](auto& t) {
        return grouped_linear(t[0], counts, {t[1], unused, t[2], t[3]});
      },
      {x, w0, w2, w3}));
  // Frozen weights (no weight gradient: x is not kept for one).
  EXPECT_TRUE(gradcheck([&](auto& t) { return grouped_linear(t[0], counts, {unused, unused, unused, unused}); }, {x}));
  // A transposed view of x (its rows strided) and one group holding every row.
  Tensor xt = uniform({4, 6}, 6);
  EXPECT_TRUE(gradcheck([&](auto& t) { return grouped_linear(t[0].t(), std::vector<int64_t>{6}, {t[1]}); }, {xt, w0}));
}

TEST(GradcheckGroupedLinear, StackedWeights) {
  // Weights stacked (4, 5, 4); group 1 has no rows: its slice of the gradient is zeros.
  const Tensor x0 = uniform({6, 4}, 7), w0 = uniform({4, 5, 4}, 8);
  const std::vector<int64_t> counts = {2, 0, 3, 1};
  EXPECT_TRUE(gradcheck([&](auto& t) { return grouped_linear_stacked(t[0], counts, t[1]); }, {x0, w0}));
  // The same rows and gradients as the list of the stacked slices.
  auto fresh = [](const Tensor& t) {
    Tensor c = t.detach().clone();
    c.set_requires_grad(true);
    return c;
  };
  Tensor x = fresh(x0), w = fresh(w0), x2 = fresh(x0), w2 = fresh(w0);
  Tensor y = grouped_linear_stacked(x, counts, w);
  sum(y).backward();
  EXPECT_EQ(max(abs(w.grad().select(0, 1))).item<double>(), 0.0);
  std::vector<Tensor> slices;
  for (int64_t g = 0; g < 4; ++g) slices.push_back(w2.select(0, g));
  Tensor y2 = grouped_linear(x2, counts, slices);
  EXPECT_TRUE(testing::bitwise_equal(y.detach(), y2.detach()));
  sum(y2).backward();
  EXPECT_TRUE(testing::bitwise_equal(x.grad(), x2.grad()));
  EXPECT_TRUE(testing::bitwise_equal(w.grad(), w2.grad()));
  EXPECT_THROW(grouped_linear_stacked(x0, counts, uniform({3, 5, 4}, 9)), Error);  // 3 stacked for 4 groups
}

// Each group's rows, and every gradient, as one linear layer per group computes them.
void expect_as_linear_per_group(DType dtype, double rtol, double atol) {
  SCOPED_TRACE(std::string(dtype_name(dtype)));
  manual_seed(21);
  const std::vector<int64_t> counts = {37, 0, 130, 1, 64, 9};  // 241 rows
  std::vector<Tensor> w, w_ref;
  for (size_t g = 0; g < counts.size(); ++g) {
    w.push_back(randn({48, 40}).to(dtype));
    w_ref.push_back(w.back().detach().clone());
    w.back().set_requires_grad(true);
    w_ref.back().set_requires_grad(true);
  }
  Tensor x = randn({241, 40}).to(dtype), x_ref = x.detach().clone();
  x.set_requires_grad(true);
  x_ref.set_requires_grad(true);
  Tensor dy = randn({241, 48}).to(dtype);  // the output's gradient

  Tensor y = grouped_linear(x, counts, w);
  std::vector<Tensor> parts;
  int64_t start = 0;
  for (size_t g = 0; g < counts.size(); ++g) {
    if (counts[g] > 0) parts.push_back(linear(x_ref.narrow(0, start, counts[g]), w_ref[g]));
    start += counts[g];
  }
  Tensor y_ref = cat(parts, 0);
  EXPECT_TRUE(all_close(y.to(DType::f64), y_ref.to(DType::f64), rtol, atol));
  sum(mul(y, dy)).backward();
  sum(mul(y_ref, dy)).backward();
  EXPECT_TRUE(all_close(x.grad().to(DType::f64), x_ref.grad().to(DType::f64), rtol, atol));
  for (size_t g = 0; g < counts.size(); ++g) {
    ASSERT_EQ(w[g].grad().defined(), counts[g] > 0) << "group " << g;
    if (counts[g] > 0) {
      EXPECT_TRUE(all_close(w[g].grad().to(DType::f64), w_ref[g].grad().to(DType::f64), rtol, atol)) << "group " << g;
    }
  }
}

TEST(GroupedLinear, IsOneLinearPerGroupF32) { expect_as_linear_per_group(DType::f32, 1e-5, 1e-5); }

// bf16: the same f32 sums (each product exact in f32), rounded once to bf16 either way; the sums' order may
// differ (another primitive), so outputs may differ by one bf16 rounding step: 2^-8 relative.
TEST(GroupedLinear, IsOneLinearPerGroupBf16) { expect_as_linear_per_group(DType::bf16, 1.0 / 128, 1e-2); }

TEST(GroupedLinear, SameBitsOnEveryCall) {
  manual_seed(22);
  const std::vector<int64_t> counts = {100, 3, 70, 50};
  std::vector<Tensor> w;
  for (int g = 0; g < 4; ++g) w.push_back(randn({64, 32}).to(DType::bf16));
  Tensor x = randn({223, 32}).to(DType::bf16);
  EXPECT_TRUE(testing::bitwise_equal(grouped_linear(x, counts, w), grouped_linear(x, counts, w)));
}

TEST(GroupedLinear, RefusesWhatDoesNotFit) {
  const Tensor x = zeros({5, 4}), w = zeros({3, 4});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] {
              grouped_linear(x, std::vector<int64_t>{2, 2}, {w, w});
            }).find("rows are not x's 5"),
            std::string::npos);
  EXPECT_NE(message([&] {
              grouped_linear(x, std::vector<int64_t>{5}, {w, w});
            }).find("1 group row counts for 2"),
            std::string::npos);
  EXPECT_NE(message([&] {
              grouped_linear(x, std::vector<int64_t>{2, 3}, {w, zeros({3, 5})});
            }).find("weight 1 is"),
            std::string::npos);
  EXPECT_NE(message([&] {
              grouped_linear(x, std::vector<int64_t>{6, -1}, {w, w});
            }).find("has -1 rows"),
            std::string::npos);
  EXPECT_THROW(grouped_linear(x, std::vector<int64_t>{5}, {w.to(DType::f64)}), Error);
  EXPECT_THROW(grouped_linear(zeros({5}), std::vector<int64_t>{5}, {w}), Error);
}

}  // namespace
}  // namespace tidal
