#pragma once
// CPU kernels of the fused cross-entropy: logits are read in place (rows with a unit inner stride and
// one row stride), nothing of the logits' size is allocated in forward, and backward writes the
// gradient in a single pass.
#include <cstdint>

#include "tidal/backend/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

// Position of the first target outside [0, vocab) that is not ignore_index, or -1. targets:
// contiguous (rows) i32 or i64.
int64_t find_bad_target(const Tensor& targets, const CrossEntropyArgs& a);

// Per row r: lse[r] = log(sum(exp(logits[r]))), loss[r] = lse[r] - logits[r, target[r]]; both 0 for
// ignored rows. lse and loss (rows) are in the accumulate dtype. Targets must be valid.
CrossEntropySums cross_entropy_forward(const Tensor& loss, const Tensor& lse, const Tensor& logits,
                                       const Tensor& targets, const CrossEntropyArgs& a);
// dlogits (rows, vocab) contiguous = (softmax(logits) - onehot(target)) * s_r, with s_r = scale *
// row_grad[r] when row_grad (rows, logits dtype) is defined, else scale. Ignored rows get zeros.
void cross_entropy_backward(const Tensor& dlogits, const Tensor& logits, const Tensor& lse, const Tensor& targets,
                            const Tensor& row_grad, double scale, const CrossEntropyArgs& a);

}  // namespace tidal::cpu
