#pragma once
// Expert parallelism's token exchange (Megatron's all-to-all token dispatcher; docs/distributed.md "Expert
// parallel"): the rows a rank routed, grouped by expert, go to the ranks that own those experts, run through them
// there, and come back. The MoE blocks that divide their experts among a group share it (models/moe.h's
// SparseMoeBlock, models/deepseek_v4_moe.h).
#include <functional>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/tensor.h"

namespace tidal::models {

// What an owner runs: its experts' rows `grouped` (R, C), grouped by local expert (`mine[l]` rows of its l-th
// expert; each expert's rows from every rank of the group, in rank order) -> (R, C'), row for row.
using RunLocalExperts = std::function<Tensor(const Tensor& grouped, const std::vector<int64_t>& mine)>;

// `rows` (M, C): this rank's rows grouped by expert in expert order, counts[e] of them for expert e (every expert of
// the layer, E of them). Rank r of `group` owns experts [r L, (r + 1) L), L = E / group size. The rows go to their
// owners (every rank sends its counts first), `run` runs each owner's (not called for an owner that received no
// rows; it still takes part in both exchanges), and the results come back: (M, C') in `rows`' order.
// Differentiable (ops/all_to_all.h); on the meta device only the shapes move.
Tensor run_on_owners(dist::Communicator& group, const Tensor& rows, const std::vector<int64_t>& counts,
                     const RunLocalExperts& run);

}  // namespace tidal::models
