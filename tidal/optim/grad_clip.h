#pragma once
// Gradient clipping by the global L2 norm, as torch.nn.utils.clip_grad_norm_ (norm_type 2).
#include <vector>

#include "tidal/tensor.h"

namespace tidal::optim {

// The L2 norm of all gradients together (parameters without a gradient are skipped), accumulated in
// f64 over fixed chunks: the same value for any number of threads. When max_norm > 0 and
// clip_coef = max_norm / (norm + 1e-6) is below 1 (the norm exceeds max_norm), every gradient is
// scaled in place by clip_coef, in the gradient's dtype, as PyTorch does. max_norm <= 0 only measures.
// Returns the norm before clipping. A non-finite norm leaves the gradients unchanged (PyTorch would
// multiply them by NaN): the caller sees it in the return value and should skip the step. On meta
// gradients nothing can be measured: returns 0 and changes nothing.
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);
// The same norm without clipping.
double grad_norm(const std::vector<Tensor>& params);

}  // namespace tidal::optim
