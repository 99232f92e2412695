#pragma once
// Finiteness checks for the NaN/Inf guard of `tidal train` (train/nan_guard.h) and for checkpoints,
// which never hold a non-finite weight.
#include <string>

#include "tidal/optim/adamw.h"
#include "tidal/tensor.h"

namespace tidal::optim {

// Whether no element of `t` is a NaN or an infinity. Integer and meta tensors are finite. Measured as
// the f64 sum of squares (the backend's one reduction pass), exact for f32 and bf16 values; an f64
// value above 1e154 counts as non-finite, which for a weight or a gradient is divergence anyway.
bool all_finite(const Tensor& t);

// The name of the first parameter (in `params` order) whose gradient is not finite; "" when none is.
std::string first_nonfinite_grad(const NamedParameters& params);
// The name of the first parameter whose value is not finite; "" when none is. Parameters whose bytes are
// released (ZeRO-3 between its gathers) are not looked at.
std::string first_nonfinite_weight(const NamedParameters& params);

}  // namespace tidal::optim
