#pragma once
// CPU kernels of the optimizer family: the fused AdamW update and the f64 sum of squares that
// gradient clipping measures. Contiguous tensors only (parameters and gradients are).
#include <cstdint>

#include "tidal/backend/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::cpu {

// One AdamW update in a single pass, torch.optim.AdamW's arithmetic (see tidal/optim/adamw.h).
// param and grad (n) share the param dtype; exp_avg and exp_avg_sq (n) are acc_t of it; master (n, f32)
// is the master weight of a bf16 param (undefined otherwise): it is updated and param := bf16(master).
void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                const Tensor& master, const AdamWArgs& a);

// sum(x^2) accumulated in f64 over fixed chunks added in order: the same bits for any thread count.
void sum_of_squares(const Tensor& x, int64_t chunk, double* partials);

}  // namespace tidal::cpu
