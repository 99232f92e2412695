#pragma once
// A grouped linear layer: the rows of x come in consecutive groups, and each group is multiplied by its own
// weight. An MoE layer's experts on their tokens (models/moe.cpp) as one op: forward and backward each run
// all their products in one Kernels::matmul_many call (concurrent on the CPU: Note [Grouped products]).
#include <cstdint>
#include <span>
#include <vector>

#include "tidal/tensor.h"

namespace tidal {

// x (M, in), rows grouped: counts[g] rows for group g, sum(counts) = M; weights[g] (out, in).
// Returns (M, out): group g's rows times weights[g]^T. A group of no rows is skipped: its weight gets no
// gradient (as a layer that did not run).
Tensor grouped_linear(const Tensor& x, std::span<const int64_t> counts, const std::vector<Tensor>& weights);
// The same with the groups' weights stacked in one tensor (G, out, in) (DeepSeek-V4's experts.gate_up_proj and
// experts.down_proj): its gradient is one (G, out, in) tensor, zeros where a group has no rows.
Tensor grouped_linear_stacked(const Tensor& x, std::span<const int64_t> counts, const Tensor& weights);

}  // namespace tidal
