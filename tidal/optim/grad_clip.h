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
// Its square before the square root: Σ g², added as grad_norm adds (a norm over gradients on several
// ranks, expert parallelism's, adds these).
double grad_sum_of_squares(const std::vector<Tensor>& params);
// Every gradient scaled in place by `coef` (clip_coefficient's), in its dtype; nothing when it is 1.
void scale_gradients(const std::vector<Tensor>& params, double coef);

// The norm's partial sums, for a norm over gradients split across ranks (dist optimizer): Σ g² over
// each chunk of kGradNormChunk elements of a gradient, from its start, in f64. A shard that starts
// on a chunk boundary of its parameter has exactly the chunks of the whole gradient, so the norm
// assembled from every rank's chunks is bit for bit grad_norm's.
inline constexpr int64_t kGradNormChunk = int64_t(1) << 14;
std::vector<double> sum_of_squares_chunks(const Tensor& g);  // contiguous; empty on meta
// The chunks added as grad_sum_of_squares adds them: within a gradient in chunk order, then the
// gradients in order (its square root is grad_norm's value).
double sum_of_squares_from_chunks(const std::vector<std::vector<double>>& per_gradient);
// What clip_grad_norm scales the gradients by: max_norm / (norm + 1e-6) when that is below 1 (and
// max_norm > 0 and the norm finite), else exactly 1 (no scaling).
double clip_coefficient(double norm, double max_norm);

}  // namespace tidal::optim
