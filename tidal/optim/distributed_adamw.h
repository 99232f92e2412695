#pragma once
// Megatron's distributed optimizer (--use-distributed-optimizer, ZeRO-1; docs/distributed.md): every
// rank holds the whole model, but AdamW's states only for its shard of the parameters
// (optim/shard_layout.h). Per step:
//   1. backward leaves every parameter's gradient as in one process;
//   2. the gradients are reduce-scattered: each rank receives every rank's pieces of its shard and
//      adds them in rank order into a shard-sized gradient; the whole gradients are then freed;
//   3. the gradient norm is assembled from every shard's chunk sums (bit for bit the unsharded norm)
//      and the shard clipped;
//   4. the local AdamW updates the shard's pieces of the parameters (views of the parameters);
//   5. every rank's pieces are all-gathered into the parameters in place, so every rank holds the
//      updated model. The parameters stay where the model made them: no second copy, ever.
// With one micro-batch per rank the result is bit for bit one process's (tests/dist/).
// With `shard_parameters` (ZeRO-3, --data-parallel-sharding-strategy optim_grads_params) this rank's
// pieces of the parameters live in a shard of their own, the AdamW updates them there, and the whole
// parameters exist only between gather_parameters and release_parameters (train/param_gather.h).
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/optim/adamw.h"
#include "tidal/optim/shard_layout.h"
#include "tidal/optim/shard_state.h"

namespace tidal::optim {

class DistributedAdamW {
 public:
  // All parameters must be contiguous and share a dtype and device.
  DistributedAdamW(const NamedParameters& params, dist::Communicator& comm, bool shard_parameters = false);

  // This rank's pieces of the parameters, as parameters of their own (flat views of the parameters
  // named "<name>" or "<name>[begin:end]"), for the AdamW that updates them (swapped or not), with
  // the weight-decay rule of the whole parameters.
  const NamedParameters& shard_parameters() const { return shard_params_; }
  DecayRule decay_rule() const;

  // Reduce-scatters the gradients of parameters `subset` (indexes into the constructor's list) into
  // this rank's shard: every rank's pieces added in rank order onto what earlier calls of the step
  // summed there; their whole gradients are then freed. A collective: every rank calls it with the
  // same subsets in the same order. Once per step after the last backward (ZeRO-1), after every
  // micro-batch's backward (ZeRO-2: --data-parallel-sharding-strategy optim_grads), or bucket by
  // bucket during backward (--overlap-grad-reduce). A parameter without a gradient on some ranks
  // counts zeros there; one without a gradient on every rank takes no part.
  // `via`: a duplicate of the communicator, for a stream's thread (null: the constructor's).
  void reduce_scatter(const std::vector<size_t>& subset, dist::Communicator* via = nullptr);
  // After the step's last reduce_scatter: the shard's sums become the local AdamW's gradients
  // (none for a parameter that had none on every rank all step, which AdamW then skips, as in one
  // process), and returns the norm of the whole gradients (a collective).
  double finish_reduction();
  // Then: clips the shard to `max_norm` (<= 0: none) given the `norm` finish_reduction returned,
  // `local.step(lr)` on the shard, and (without sharded parameters) all-gathers the updated pieces
  // into the parameters.
  void update(double lr, double max_norm, double norm, AdamW& local);
  // Frees the shard's gradient (after update, or when the step is skipped).
  void finish_step();

  // Every rank's pieces of parameters `subset` into the parameters (a collective; with sharded
  // parameters their bytes are allocated again first and this rank's pieces come from its shard).
  void gather_parameters(const std::vector<size_t>& subset, dist::Communicator* via = nullptr);
  // The same in two halves: the bytes allocated and this rank's pieces copied now, the exchange with
  // the other ranks in the function returned (run it once, e.g. on a stream; --overlap-param-gather).
  std::function<void()> start_gather(const std::vector<size_t>& subset, dist::Communicator* via = nullptr);
  // Sharded parameters: frees the whole parameters' bytes (their tensors stay valid).
  void release_parameters(const std::vector<size_t>& subset);
  // Sharded parameters: this rank's pieces from the whole parameters into the shard (after they were
  // built or loaded). A parameter whose bytes are released is first given them by `materialize` (a
  // deferred init: nn/deferred_init.h) and released again, one at a time.
  void copy_shard_from_parameters(const std::function<void(const Tensor&)>& materialize = {});
  bool shards_parameters() const { return shard_parameters_; }

  // Checkpoints (distributed_adamw_state.cpp; docs/distributed.md): every rank saves its local
  // AdamW's state_dict (its shard parameters' states) in a file of its own. The whole parameters
  // and their layout over the ranks, which a checkpoint records so it can be re-sharded:
  const NamedParameters& parameters() const { return params_; }
  const ShardLayout& layout() const { return layout_; }
  // Loads into `local` this rank's pieces of a saved state (of any number of ranks, or of one
  // process: optim/shard_state.h), reading only the saved ranks that hold them.
  void load_state(AdamW& local, const SavedState& saved) const;

 private:
  dist::Communicator& comm_;
  NamedParameters params_;
  bool shard_parameters_ = false;
  Tensor shard_data_;  // (shard elements): this rank's pieces of the parameters, with shard_parameters
  ShardLayout layout_;
  Tensor shard_grad_;           // (shard elements): this rank's summed gradients, during a step
  std::vector<char> has_grad_;  // per parameter: whether it had a gradient on some rank this step
  NamedParameters shard_params_;
  std::vector<std::string> shard_names_of_;  // the whole parameter's name of each shard parameter
};

}  // namespace tidal::optim
