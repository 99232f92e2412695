#pragma once
// For ops/: dropout at the stream positions of a piece of a larger tensor (DropoutRowsArgs,
// seam/kernel_args.h). dropout_rows (random.h) and the eager attention's global dropout frame
// (attention.h) call it; it checks nothing but x's dtype (the callers check the frame).
#include "tidal/seam/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal::detail {

// x (outer, rows, inner) in memory order when made contiguous; a.outer/rows/inner describe it.
// Same u8 mask and backward as dropout(); p in (0, 1). Runs in OpScope(op).
Tensor dropout_at(const char* op, const Tensor& x, double p, const DropoutRowsArgs& a);

}  // namespace tidal::detail
