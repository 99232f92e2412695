#pragma once
// The parallel layout of a run, one value (torchtitan's ParallelDims): how many ranks, how they
// split the data, each sequence (context parallel) and the experts (expert parallel), what they
// shard, and how the gradient reduction and ZeRO-3's gathers overlap compute. Parsed once from
// `tidal train`'s flags (docs/distributed.md); the trainer binds the world to its communicator, the
// planner to the ranks it plans for, and both hand the same value to the estimator, the cost model
// and the out-of-memory advice. The communicators of a layout are parallel/groups.h.
//
// Ranks, Megatron's order: world = data × context. Context-parallel groups are contiguous blocks of C
// ranks, data-parallel groups strided across them; expert-parallel groups are contiguous blocks of E
// ranks carved from all of them, expert-data groups strided (world / E ranks holding the same experts).
#include <cstdint>
#include <nlohmann/json_fwd.hpp>

#include "tidal/base/flags.h"
#include "tidal/dist/communicator_factory.h"
#include "tidal/models/config.h"

namespace tidal::parallel {

// What the data-parallel ranks split among themselves (Megatron-FSDP's
// --data-parallel-sharding-strategy; --use-distributed-optimizer is `optim`).
enum class ShardingStrategy { no_shard, optim, optim_grads, optim_grads_params };
const char* sharding_name(ShardingStrategy s);

struct ParallelLayout {
  int world = 1;    // ranks (mpirun -np N; tidal plan --data-parallel-size N): bound with on()
  int context = 1;  // --context-parallel-size C: each sequence split over C ranks (parallel/context.h)
  int expert = 1;   // --expert-model-parallel-size E: each MoE layer's experts over E ranks (parallel/expert.h)
  ShardingStrategy sharding = ShardingStrategy::no_shard;
  // --overlap-grad-reduce: gradients reduced bucket by bucket on the "comm" stream as backward
  // produces them (parallel/grad_sync.h), instead of all at once after it.
  bool overlap_grad_reduce = false;
  // --overlap-param-gather (ZeRO-3): the next layer's parameters gathered on the "gather" stream
  // while the current layer computes (parallel/param_gather.h).
  bool overlap_param_gather = false;
  // --ddp-bucket-size: parameters (elements) per bucket; 0 is Megatron's default, max(4e7, 1e6 × ranks).
  int64_t bucket_size = 0;
  // --distributed-timeout-minutes (Megatron's, default 10): a collective not done after this long ends the
  // job (dist::set_collective_timeout).
  double timeout_minutes = 10;
  // --distributed-backend (Megatron's): mpi moves every buffer over MPI; nccl moves device memory over
  // NCCL (the CUDA backend; bootstrapped over MPI, which keeps the host buffers) — docs/cuda.md.
  dist::DistributedBackend backend = dist::DistributedBackend::mpi;

  int data() const { return world / context; }        // ranks that read different samples
  int expert_data() const { return world / expert; }  // ranks that hold the same experts
  bool sharded() const { return sharding != ShardingStrategy::no_shard; }
  bool shards_gradients() const {  // ZeRO-2 and 3: only the shard's sums are kept between micro-batches
    return sharding == ShardingStrategy::optim_grads || sharding == ShardingStrategy::optim_grads_params;
  }
  bool shards_parameters() const { return sharding == ShardingStrategy::optim_grads_params; }  // ZeRO-3
  // Whether a step of `micro_batches` per rank reduce-scatters in place, into the whole gradients (Note
  // [Reduce-scatter in place], optim/distributed_adamw.cpp): sharded, each gradient reduced once (ZeRO-1;
  // ZeRO-2/3 with one micro-batch), and not bucket by bucket during backward (--overlap-grad-reduce frees each
  // bucket's whole gradients once reduced, beside the shard's own sums, under every strategy).
  bool reduces_in_place(int64_t micro_batches) const {
    return sharded() && !overlap_grad_reduce && (!shards_gradients() || micro_batches == 1);
  }
  // Whether a step's reducing backwards reduce bucket by bucket as backward completes them (parallel/grad_sync.h):
  // with --overlap-grad-reduce on the "comm" stream; without it ZeRO-2/3 with accumulation do too, synchronously
  // on the compute thread (freeing each bucket's whole gradients, as DeepSpeed's ZeRO-2), on more than one rank
  // (one has nothing to shard) for a model without experts (`experts`: whether it has any; Note [Synchronous
  // buckets], parallel/grad_sync.cpp).
  bool reduces_by_bucket(int64_t micro_batches, bool experts) const {
    return overlap_grad_reduce || (shards_gradients() && world > 1 && !experts && !reduces_in_place(micro_batches));
  }
  int64_t bucket_elements() const;
  // The elements of a bucket of a model of `elements` trained elements: --ddp-bucket-size's; without
  // --overlap-grad-reduce and without the flag (ZeRO-2/3's synchronous buckets), at most half a rank's share of
  // the model, so that a bucket's whole gradients and its exchange's temporary together stay within a shard's
  // bytes beside the shard's sums (the peak then never above ZeRO-1's whole gradients).
  int64_t bucket_elements_of(int64_t elements) const;
  // This layout on `ranks` ranks; throws tidal::Error naming the flag unless C divides them.
  ParallelLayout on(int ranks) const;
  bool operator==(const ParallelLayout&) const = default;
};

// The most ranks tidal plans for (tidal plan --data-parallel-size).
inline constexpr int64_t kMaxDataParallelSize = 1 << 20;

// The flags of distributed training (sharding, overlap, buckets, expert and context parallel sizes),
// added to `tidal train`'s table, and their typed value (world 1).
Flags& add_parallel_flags(Flags& f);
ParallelLayout parse_parallel_layout(const Flags& f);
// What a run's settings record of it (--metrics-json, checkpoints' state.json).
void to_json(nlohmann::json& j, const ParallelLayout& l);

// Throw tidal::Error naming the numbers unless the layout runs: E divides the world and the model's
// experts and the model has experts (E > 1); 2C divides the sequence (each rank holds two equal chunks).
void check_expert_parallel(const ParallelLayout& l, const models::ModelConfig& model);
void check_context_parallel(const ParallelLayout& l, int64_t seq_length);

}  // namespace tidal::parallel
