#pragma once
// Meta tensors must be accounted exactly like real ones (the planner relies on it). This runs a
// function forward and backward on cpu tensors and on meta tensors of the same shapes and compares
// the output shapes, the allocated bytes after forward, the peak during forward + backward, and
// the gradient shapes.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "tidal/tensor.h"

namespace tidal::testing {

struct InputSpec {
  Shape shape;
  DType dtype = DType::f32;
  bool requires_grad = true;
  double lo = -1.0, hi = 1.0;  // value range on cpu (integers: [lo, hi))
};

::testing::AssertionResult meta_matches_cpu(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                            const std::vector<InputSpec>& inputs);

}  // namespace tidal::testing
