#pragma once
// Data parallelism of `tidal train` over the ranks of a dist::Communicator (docs/distributed.md):
// which samples each rank reads, and the gradients and loss summed over the ranks — Megatron's
// semantics, so N ranks see exactly the global batch one process accumulating the same micro-batches
// sees.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tidal/data/gpt_dataset.h"
#include "tidal/dist/communicator.h"
#include "tidal/tensor.h"

namespace tidal::parallel {

// Micro-batches each rank runs per step: global batch = micro-batch × this × ranks. A global batch
// that does not divide is an error naming the three numbers.
int64_t micro_batches_per_rank(int64_t global_batch, int64_t micro_batch, int ranks);

// Rank `rank`'s next micro-batch. The ranks read the global batch's micro-batches in turn — at
// loader position p, rank r reads samples [p + r·b, p + (r+1)·b) — and every rank's loader then
// stands at p + ranks·b: one process with ranks × the accumulation reads the same samples in the
// same order (Megatron's pretraining sampler).
data::Batch next_rank_batch(data::DataLoader& loader, int64_t micro_batch, int rank, int ranks);

// Sums every parameter's gradient over the ranks, in rank order (dist/collectives.h), in place. A
// parameter without a gradient on some ranks (an expert no token of theirs chose) gets a zero one
// there; a parameter without one on every rank keeps none, as in one process.
void all_reduce_gradients(dist::Communicator& comm, const std::vector<std::pair<std::string, Tensor>>& params);

}  // namespace tidal::parallel
