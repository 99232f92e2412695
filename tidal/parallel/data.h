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

#include "tidal/base/flags.h"
#include "tidal/data/gpt_dataset.h"
#include "tidal/dist/communicator.h"
#include "tidal/tensor.h"

namespace tidal::parallel {

// What the data-parallel ranks split among themselves (Megatron-FSDP's
// --data-parallel-sharding-strategy; --use-distributed-optimizer is `optim`).
enum class ShardingStrategy { no_shard, optim, optim_grads, optim_grads_params };
const char* sharding_name(ShardingStrategy s);

// How the data-parallel ranks train together: what they shard and how gradients are reduced.
struct DataParallelConfig {
  ShardingStrategy sharding = ShardingStrategy::no_shard;
  // --overlap-grad-reduce: gradients reduced bucket by bucket on the "comm" stream as backward
  // produces them (parallel/grad_sync.h), instead of all at once after it.
  bool overlap_grad_reduce = false;
  // --ddp-bucket-size: parameters (elements) per bucket; 0 is Megatron's default, max(4e7, 1e6 × ranks).
  int64_t bucket_size = 0;
  // --overlap-param-gather (ZeRO-3): the next layer's parameters gathered on the "gather" stream
  // while the current layer computes (parallel/param_gather.h).
  bool overlap_param_gather = false;
  // --expert-model-parallel-size E (Megatron's): each MoE layer's experts divided among E ranks
  // (parallel/expert.h); 1: every rank holds every expert.
  int expert_parallel = 1;
  int64_t bucket_elements(int ranks) const {
    return bucket_size > 0 ? bucket_size : std::max<int64_t>(40000000, int64_t(1000000) * ranks);
  }
};

// The flags of distributed training, added to `tidal train`'s table, and their typed value.
Flags& add_data_parallel_flags(Flags& f);
DataParallelConfig parse_data_parallel(const Flags& f);

// The most ranks tidal plans for (tidal plan --data-parallel-size).
inline constexpr int64_t kMaxDataParallelSize = 1 << 20;

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
