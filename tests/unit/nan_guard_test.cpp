// The NaN/Inf guard of `tidal train` (train/nan_guard.h) and the finiteness checks under it
// (optim/finite.h): a non-finite gradient is found by name, and the stop names the step and the
// tensor. End to end: tests/integration/train_guards_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/support/error_of.h"
#include "tidal/optim/finite.h"
#include "tidal/train/arguments.h"
#include "tidal/train/nan_guard.h"

namespace tidal::train {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Three parameters with finite gradients; poison(i, v) puts v into element 1 of gradient i.
struct Params {
  optim::NamedParameters named = {
      {"embed.weight", ones({4, 3})}, {"layer.0.weight", ones({3, 3})}, {"layer.1.bias", ones({3}, DType::bf16)}};
  Params() {
    for (auto& [name, p] : named) p.set_grad(full(p.shape(), 0.5, p.dtype()));
  }
  void poison(size_t i, double v) {
    Tensor g = named[i].second.grad();
    if (g.dtype() == DType::bf16)
      g.narrow(0, 1, 1).fill_(v);
    else
      g.data<float>()[1] = float(v);
  }
};

TEST(NanGuard, FiniteTensorsAreFinite) {
  EXPECT_TRUE(optim::all_finite(ones({5})));
  EXPECT_TRUE(optim::all_finite(full({5}, 3e38)));  // the largest f32 values square fine in f64
  EXPECT_TRUE(optim::all_finite(Tensor()));
  EXPECT_TRUE(optim::all_finite(zeros({0, 3})));
  EXPECT_TRUE(optim::all_finite(zeros({3}, DType::i64)));
  EXPECT_TRUE(optim::all_finite(empty({3}, DType::f32, Device::meta())));
  Tensor t = ones({2, 3});
  t.data<float>()[4] = float(kNaN);
  EXPECT_FALSE(optim::all_finite(t));
  t.data<float>()[4] = -float(kInf);
  EXPECT_FALSE(optim::all_finite(t));
  EXPECT_FALSE(optim::all_finite(full({2}, kInf, DType::bf16)));
  EXPECT_FALSE(optim::all_finite(t.transpose(0, 1)));  // a strided view is measured too
}

TEST(NanGuard, TheFirstNonFiniteGradientIsNamed) {
  Params p;
  EXPECT_EQ(optim::first_nonfinite_grad(p.named), "");
  EXPECT_EQ(nonfinite_step(2.5, 1.0, p.named), "");
  p.poison(2, kInf);
  EXPECT_EQ(optim::first_nonfinite_grad(p.named), "layer.1.bias");
  p.poison(1, kNaN);
  EXPECT_EQ(optim::first_nonfinite_grad(p.named), "layer.0.weight");
  EXPECT_EQ(nonfinite_step(2.5, kNaN, p.named), "the gradient norm is nan (first non-finite gradient: layer.0.weight)");
  EXPECT_EQ(nonfinite_step(kInf, kNaN, p.named), "the loss is inf (first non-finite gradient: layer.0.weight)");
  EXPECT_EQ(nonfinite_step(kNaN, 1.0, Params().named), "the loss is nan");
  // A parameter without a gradient (an expert no token reached) is skipped, not an error.
  p.named.insert(p.named.begin(), {"unused.weight", ones({2})});
  EXPECT_EQ(optim::first_nonfinite_grad(p.named), "layer.0.weight");
}

TEST(NanGuard, StoppingNamesTheStepTheTensorAndTheWayOut) {
  Params p;
  p.poison(0, kNaN);
  TrainArgs args;
  args.schedule.lr = 0.5;
  const std::string msg =
      testing::error_of([&] { stop_nonfinite(7, nonfinite_step(3.0, kNaN, p.named), args, p.named); });
  EXPECT_EQ(msg,
            "iteration 7: the gradient norm is nan (first non-finite gradient: embed.weight); training stopped before "
            "the optimizer step, so no weight took it (--check-for-nan-in-loss-and-grad). Try a lower --lr (now 0.5), "
            "a longer --lr-warmup-iters or --clip-grad; --skip-nonfinite-steps skips such steps instead");
  // A weight that is not finite before the step: the run's start is at fault, not the learning rate.
  optim::NamedParameters bad = p.named;
  bad.back().second = full({2}, std::numeric_limits<float>::quiet_NaN());
  args.pretrained = "hf/dir";
  const std::string corrupt = testing::error_of([&] { stop_nonfinite(1, "the loss is nan", args, bad); });
  EXPECT_NE(corrupt.find("The weights hold NaN or infinite values already (first: " + bad.back().first +
                         "): the --pretrained directory hf/dir is corrupt; no --lr fixes that"),
            std::string::npos)
      << corrupt;
}

TEST(NanGuard, FlagsTurnItOffOrMakeItSkip) {
  EXPECT_TRUE(parse_train_args({}).check_for_nan);
  EXPECT_FALSE(parse_train_args({}).skip_nonfinite_steps);
  EXPECT_FALSE(parse_train_args({"--no-check-for-nan-in-loss-and-grad"}).check_for_nan);
  EXPECT_TRUE(parse_train_args({"--check-for-nan-in-loss-and-grad"}).check_for_nan);
  EXPECT_TRUE(parse_train_args({"--skip-nonfinite-steps"}).skip_nonfinite_steps);
  EXPECT_NE(testing::error_of([] {
              parse_train_args({"--skip-nonfinite-steps", "--no-check-for-nan-in-loss-and-grad"});
            }).find("--skip-nonfinite-steps needs the check"),
            std::string::npos);
}

}  // namespace
}  // namespace tidal::train
