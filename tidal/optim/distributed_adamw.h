#pragma once
// Megatron's distributed optimizer (--use-distributed-optimizer, ZeRO-1; docs/distributed.md): every
// rank holds the whole model, but AdamW's states only for its shard of the parameters
// (optim/shard_layout.h). Per step:
//   1. backward leaves every parameter's gradient as in one process;
//   2. the gradients are reduce-scattered: each rank receives every rank's pieces of its shard and
//      adds them in rank order (Note [Reduce-scatter in place]): into its own pieces of the whole
//      gradients when the step reduces each gradient once, kept until finish_step; else into a
//      shard-sized gradient, the whole gradients then freed;
//   3. the gradient norm is assembled from every shard's chunk sums (bit for bit the unsharded norm)
//      and the shard clipped;
//   4. the local AdamW updates the shard's pieces of the parameters (views of the parameters);
//   5. every rank's pieces are all-gathered into the parameters in place, so every rank holds the
//      updated model. The parameters stay where the model made them: no second copy, ever.
// With one micro-batch per rank the result is bit for bit one process's (tests/dist/).
// The exchanges move views of the gradients and parameters through dist::exchange (dist/collectives.h):
// on a device, NCCL reads them in place and MPI gets them staged through host buffers.
// With `shard_parameters` (ZeRO-3, --data-parallel-sharding-strategy optim_grads_params) this rank's
// pieces of the parameters live in a shard of their own, the AdamW updates them there, and the whole
// parameters exist only between gather_parameters and release_parameters (parallel/param_gather.h).
// With expert parallelism (ExpertShards; parallel/expert.h, Megatron's layout) the parameters
// form two groups, each with a layout of its own: the dense ones sharded over every rank, the experts'
// over their expert-data-parallel group (the N/E ranks holding the same experts). This rank's shard is
// its dense shard followed by its expert shard; the norm counts each expert once (its squares summed
// over the expert-parallel group).
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/nn/slab.h"
#include "tidal/optim/adamw.h"
#include "tidal/optim/shard_layout.h"
#include "tidal/optim/shard_state.h"

namespace tidal::optim {

// The most elements (over all ranks) one round of the reduce-scatter's exchange holds: 2^22, 16 MiB of f32.
inline constexpr int64_t kReduceRoundElements = int64_t(1) << 22;
// Elements of each rank's shard per round of the reduce-scatter (Note [Reduce-scatter in rounds]): the least of
// `bucket` (--ddp-bucket-size), kReduceRoundElements and the largest `shard` (at least 2^16), over `ranks`.
int64_t reduce_round(int64_t bucket, int64_t shard, int ranks);

// Expert parallelism: which parameters are experts', and the groups that shard and count them.
struct ExpertShards {
  std::vector<char> is_expert;            // per parameter
  std::map<std::string, nn::Slab> slabs;  // the parameters that are rows of a whole tensor (nn/slab.h), by name
  dist::Communicator* data = nullptr;     // the expert-data-parallel group: shards and sums them
  dist::Communicator* experts = nullptr;  // the expert-parallel group: the norm sums over it
};

// The communicators of a collective of DistributedAdamW: null means the constructor's (`dense`: over
// every rank of `comm`; `experts`: over the expert-data-parallel group). A stream passes duplicates.
struct ShardComms {
  dist::Communicator* dense = nullptr;
  dist::Communicator* experts = nullptr;
};

class DistributedAdamW {
 public:
  // All parameters must be contiguous and share a dtype and device. `experts` (expert parallelism):
  // the experts' parameters are sharded over experts->data instead of `comm`.
  DistributedAdamW(const NamedParameters& params, dist::Communicator& comm, bool shard_parameters = false,
                   const ExpertShards* experts = nullptr);

  // This rank's pieces of the parameters, as parameters of their own (flat views of the parameters
  // named "<name>" or "<name>[begin:end]"), for the AdamW that updates them (swapped or not), with
  // the weight-decay rule of the whole parameters.
  const NamedParameters& shard_parameters() const { return shard_params_; }
  DecayRule decay_rule() const;

  // Reduce-scatters the gradients of parameters `subset` (indexes into the constructor's list) into
  // this rank's shard: every rank's pieces added in rank order onto what earlier calls of the step
  // summed there; their whole gradients are then freed, or kept to finish_step when the sums are in them
  // (set_in_place). The parameters keep no gradient either way. A collective: every rank calls it with the
  // same subsets in the same order. Once per step after the last backward (ZeRO-1), after every
  // micro-batch's backward (ZeRO-2: --data-parallel-sharding-strategy optim_grads), or bucket by
  // bucket during backward (--overlap-grad-reduce; ZeRO-2/3 with accumulation: parallel/grad_sync.h). A parameter
  // without a gradient on some ranks counts zeros there; one without a gradient on every rank takes no part. `via`:
  // duplicates of the communicators, for a stream's thread.
  void reduce_scatter(const std::vector<size_t>& subset, ShardComms via = {});
  // Before a step's first reduce_scatter: whether it reduces each gradient once (ZeRO-1; ZeRO-2/3 with one
  // micro-batch per rank), so that the sums go in place into this rank's pieces of the whole gradients,
  // which stay until finish_step, and no shard-sized gradient is made (Note [Reduce-scatter in place]).
  // Off unless set; finish_step turns it off.
  void set_in_place(bool in_place);
  // The reduce-scatter's exchange goes in rounds of at most min(`elements`, kReduceRoundElements) / ranks
  // elements of each rank's shard (Note [Reduce-scatter in rounds]): its temporary stays within that many.
  void set_reduce_bucket(int64_t elements) { reduce_bucket_ = std::max<int64_t>(1, elements); }
  // After the step's last reduce_scatter: the shard's sums become the local AdamW's gradients
  // (none for a parameter that had none on every rank all step, which AdamW then skips, as in one
  // process), and returns the norm of the whole gradients (a collective).
  double finish_reduction();
  // Then: clips the shard to `max_norm` (<= 0: none) given the `norm` finish_reduction returned,
  // `local.step(lr)` on the shard, and (without sharded parameters) all-gathers the updated pieces
  // into the parameters.
  void update(double lr, double max_norm, double norm, AdamW& local);
  // Frees the shard's gradient, or in place the whole gradients (after update, or when the step is skipped).
  void finish_step();

  // Every rank's pieces of parameters `subset` into the parameters (a collective; with sharded
  // parameters their bytes are allocated again first and this rank's pieces come from its shard).
  void gather_parameters(const std::vector<size_t>& subset, ShardComms via = {});
  // The same in two halves: the bytes allocated and this rank's pieces copied now, the exchange with
  // the other ranks in the function returned (run it once, e.g. on a stream; --overlap-param-gather).
  std::function<void()> start_gather(const std::vector<size_t>& subset, ShardComms via = {});
  // Sharded parameters: frees the whole parameters' bytes (their tensors stay valid).
  void release_parameters(const std::vector<size_t>& subset);
  // Sharded parameters: this rank's pieces from the whole parameters into the shard (after they were
  // built or loaded). A parameter whose bytes are released is first given them by `materialize` (a
  // deferred init: nn/deferred_init.h) and released again, one at a time.
  void copy_shard_from_parameters(const std::function<void(const Tensor&)>& materialize = {});
  bool shards_parameters() const { return shard_parameters_; }
  // The expert-data-parallel group the experts are sharded over (null without expert parallelism).
  dist::Communicator* expert_data() const { return groups_.size() > 1 ? groups_[1].comm : nullptr; }

  // Checkpoints (distributed_adamw_state.cpp; docs/distributed.md): every rank saves its local
  // AdamW's state_dict (its shard parameters' states) in a file of its own. The whole parameters
  // and their layout over the ranks, which a checkpoint records so it can be re-sharded (not with
  // expert parallelism, whose two layouts save one process's states instead: state_pieces):
  const NamedParameters& parameters() const { return params_; }
  const ShardLayout& layout() const;
  // This rank's pieces of one process's AdamW state_dict, from `state`, its local AdamW's: each
  // moment of a shard parameter as a piece of the whole parameter's moment, each whole parameter's
  // step count once (from the rank whose shard holds its first element), and with `with_step` the
  // optimizer's step count. Over every rank (over every expert-parallel rank's experts) the pieces
  // cover one process's state_dict once.
  std::vector<TensorPiece> state_pieces(const std::map<std::string, Tensor>& state, bool with_step) const;
  // What this rank's local AdamW holds of one process's state: each shard parameter as a piece of its
  // whole parameter's moments (flat), for assemble_state (optim/shard_state.h) to read from any saved
  // layout.
  std::vector<StateTarget> state_targets() const;

 private:
  // Parameters sharded over one communicator: all of them, or the dense ones and the experts'.
  struct Group {
    dist::Communicator* comm = nullptr;
    std::vector<size_t> params;  // indexes into params_, in order
    ShardLayout layout;          // over them
    int64_t at = 0;              // where this rank's shard of them starts in shard_data_ / shard_grad_
  };
  // The pieces of rank `rank` of group g's communicator, `param` an index into params_.
  std::vector<ShardLayout::Fragment> fragments(size_t g, int rank) const;
  dist::Communicator& comm_of(size_t g, ShardComms via) const;
  // reduce_scatter's halves. The whole gradients, (numel) each, of the subset's parameters that have one
  // on some rank of their group (a missing one here counted as zeros), into `grads`; returns, per group,
  // whether it reduces anything (alike on its ranks).
  std::vector<char> whole_gradients(const std::vector<size_t>& subset, ShardComms via, DType grad_dtype,
                                    std::vector<Tensor>& grads);
  // Sums group g's pieces of `grads` over its ranks into this rank's shard of shard_grad_ (in place: into
  // this rank's pieces of `grads`).
  void reduce_group(size_t g, dist::Communicator& comm, const std::vector<Tensor>& grads);

  dist::Communicator& comm_;
  NamedParameters params_;
  bool shard_parameters_ = false;
  Tensor shard_data_;             // (shard elements): this rank's pieces of the parameters, with shard_parameters
  std::vector<Group> groups_;     // [0] dense (or all), [1] the experts'
  std::vector<size_t> group_of_;  // per parameter: its group
  dist::Communicator* expert_parallel_ = nullptr;  // with experts: their norm's squares summed over it
  std::map<std::string, nn::Slab> slabs_;          // with experts: ExpertShards::slabs (checkpoint pieces)
  Tensor shard_grad_;                              // (shard elements): this rank's summed gradients, during a step
  bool in_place_ = false;                          // set_in_place: sums in whole_ instead of shard_grad_
  std::vector<Tensor> whole_;   // in place, per parameter: its whole gradient (numel), the shard's sums in it
  std::vector<char> has_grad_;  // per parameter: whether it had a gradient on some rank this step
  int64_t reduce_bucket_ = int64_t(1) << 62;  // set_reduce_bucket: one round unless set
  NamedParameters shard_params_;
  std::vector<size_t> shard_whole_of_;  // the whole parameter (an index into params_) of each shard parameter
};

}  // namespace tidal::optim
