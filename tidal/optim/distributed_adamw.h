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
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/optim/adamw.h"
#include "tidal/optim/shard_layout.h"

namespace tidal::optim {

class DistributedAdamW {
 public:
  // All parameters must be contiguous and share a dtype and device.
  DistributedAdamW(const NamedParameters& params, dist::Communicator& comm);

  // This rank's pieces of the parameters, as parameters of their own (flat views of the parameters
  // named "<name>" or "<name>[begin:end]"), for the AdamW that updates them (swapped or not), with
  // the weight-decay rule of the whole parameters.
  const NamedParameters& shard_parameters() const { return shard_params_; }
  DecayRule decay_rule() const;
  size_t num_parameters() const { return params_.size(); }

  // Reduce-scatters the gradients of parameters `subset` (indexes into the constructor's list) into
  // this rank's shard: every rank's pieces added in rank order onto what earlier calls of the step
  // summed there; their whole gradients are then freed. A collective: every rank calls it with the
  // same subsets in the same order. Once per step after the last backward (ZeRO-1), after every
  // micro-batch's backward (ZeRO-2: --data-parallel-sharding-strategy optim_grads), or bucket by
  // bucket during backward (--overlap-grad-reduce). A parameter without a gradient on some ranks
  // counts zeros there; one without a gradient on every rank takes no part.
  void reduce_scatter(const std::vector<size_t>& subset);
  // After the step's last reduce_scatter: the shard's sums become the local AdamW's gradients
  // (none for a parameter that had none on every rank all step, which AdamW then skips, as in one
  // process), and returns the norm of the whole gradients (a collective).
  double finish_reduction();
  // Both at once, over every parameter.
  double reduce_gradients() {
    std::vector<size_t> all(params_.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    reduce_scatter(all);
    return finish_reduction();
  }
  // Then: clips the shard to `max_norm` (<= 0: none) given the `norm` reduce_gradients returned,
  // `local.step(lr)` on the shard, and all-gathers the updated pieces into the parameters.
  void update(double lr, double max_norm, double norm, AdamW& local);
  // Frees the shard's gradient (after update, or when the step is skipped).
  void finish_step();

  // The optimizer's state as one process's AdamW holds it (whole parameters' names and shapes),
  // gathered onto rank 0: a collective. Rank 0 gets the whole state (its bytes as `temporary` memory
  // while the map lives), the other ranks an empty map. Checkpoints hold this form, so a run resumes
  // on any number of ranks, or in one process.
  std::map<std::string, Tensor> gather_state_dict(const AdamW& local);
  // Loads a whole state (a checkpoint of any number of ranks, or of one process) into `local`: this
  // rank's pieces of every tensor.
  void load_whole_state_dict(AdamW& local, const std::map<std::string, Tensor>& whole) const;

 private:
  void all_gather_parameters();

  dist::Communicator& comm_;
  NamedParameters params_;
  ShardLayout layout_;
  Tensor shard_grad_;           // (shard elements): this rank's summed gradients, during a step
  std::vector<char> has_grad_;  // per parameter: whether it had a gradient on some rank this step
  // Every rank's pieces of the parameters: (address here, bytes); empty on meta.
  std::vector<std::vector<std::pair<void*, int64_t>>> pieces_;
  NamedParameters shard_params_;
  std::vector<std::string> shard_names_of_;  // the whole parameter's name of each shard parameter
};

}  // namespace tidal::optim
