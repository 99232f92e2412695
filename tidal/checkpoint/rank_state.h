#pragma once
// What a training run's rank holds of one process's training state — pieces of the model's tensors
// and of one process's AdamW state_dict — and so what it contributes to a checkpoint's files and
// reads back from any checkpoint's. Made once at setup from the run's layout (parallel/groups.h): the
// trainer's save and resume do not know the layout.
//   - A tensor every rank holds whole is saved by the lowest rank holding it: rank 0 for the dense
//     ones; under expert parallelism each expert by its owner in rank 0's expert-parallel group (the
//     groups are contiguous: parallel/layout.h). ZeRO-3's whole parameters exist during a save
//     (parallel/param_gather.h: a whole Scope).
//   - The optimizer's states: one process's optimizer.safetensors without sharding (each state by
//     the lowest rank holding it), the distributed optimizer's own file per rank (its shard's
//     state_dict and state.json's layout), or, under expert parallelism with sharding, one process's
//     file assembled from every rank's pieces (optim::DistributedAdamW::state_pieces).
//   - A resume reads this rank's pieces of the optimizer's states from whatever files hold them
//     (optim::assemble_state), so a checkpoint of any layout resumes under any other.
#include <functional>
#include <string>

#include "tidal/checkpoint/load.h"
#include "tidal/checkpoint/save.h"
#include "tidal/models/causal_lm.h"
#include "tidal/optim/adamw.h"
#include "tidal/optim/distributed_adamw.h"
#include "tidal/parallel/groups.h"

namespace tidal::checkpoint {

class RankState {
 public:
  // All must outlive this. `sharded`: the distributed optimizer `optimizer` updates the shard of
  // (null without sharding). `adapter_config`: a LoRA run's adapter_config.json document (null
  // without LoRA); its adapters are saved apart from the base model, as PEFT's adapter files
  // (models/peft_adapter.h), and the optimizer holds the trained (adapter) parameters only.
  RankState(models::CausalLM& model, optim::AdamW& optimizer, const optim::DistributedAdamW* sharded,
            const parallel::ParallelGroups& groups, nlohmann::json adapter_config = nullptr);

  // A save's files and this rank's pieces of them (save.h: save_checkpoint writes them).
  CheckpointFiles files() const;
  // Which tensors of a whole file's this rank reads (expert parallel: its experts and the dense ones).
  std::function<bool(const std::string&)> holds() const;
  // Of the stacked tensors a slab of this rank's is rows of (nn/slab.h: its parameter and its AdamW moments), the
  // rows it reads; none without slabs.
  io::SelectRows rows() const;
  // This rank's parameters and optimizer states from `ck` (read with holds() and rows()), whatever layout saved it.
  // Throws tidal::Error naming the file when the checkpoint's parameters are not this model's.
  void load(const Checkpoint& ck) const;

 private:
  // Whether this rank saves the whole tensor `name` (a parameter, or a state named after one).
  bool saves(const std::string& name) const;

  models::CausalLM& model_;
  optim::AdamW& optimizer_;
  const optim::DistributedAdamW* sharded_;
  const parallel::ParallelGroups& groups_;
  nlohmann::json adapter_config_;
};

}  // namespace tidal::checkpoint
