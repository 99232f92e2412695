#pragma once
// Finite-difference gradient checks (f64) and tensor comparison helpers for tests. A failing check
// names the input and element with the worst error and prints a few values.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "tidal/tensor.h"

namespace tidal::testing {

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-6;
};

// Compares the gradients backward computes for sum(f(inputs) * w) (w random, fixed seed) with central
// differences, for every input that requires grad. Inputs should be f64.
::testing::AssertionResult gradcheck(const Fn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt = {});

// Uniform in [lo, hi), f64, requires_grad as asked; seeded by `seed`.
Tensor uniform(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0, bool requires_grad = true,
               DType dtype = DType::f64);

// Element-wise closeness: |a - b| <= atol + rtol * |b|. Reports the worst element.
::testing::AssertionResult all_close(const Tensor& a, const Tensor& b, double rtol = 1e-6, double atol = 1e-7);
// Bitwise equality of values (same shape and dtype).
::testing::AssertionResult bitwise_equal(const Tensor& a, const Tensor& b);

}  // namespace tidal::testing
