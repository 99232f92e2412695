#pragma once
// The optimizer's part of a training step (step.h), one object whatever the parallel layout: chosen
// once at setup, it knows where the gradients are (whole on every rank, an expert's on its owners
// only, or a shard per rank), so the step does not. It gives the gradient norm of the whole model
// over every rank (before clipping, every rank alike), names the first non-finite gradient for the
// NaN guard, and applies AdamW to what this rank updates, clipped to --clip-grad, leaving no gradient
// for the next step.
#include <memory>
#include <string>

#include "tidal/dist/communicator.h"
#include "tidal/optim/adamw.h"
#include "tidal/optim/distributed_adamw.h"

namespace tidal::train {

class OptimizerStep {
 public:
  virtual ~OptimizerStep() = default;
  // After the step's last reduction: the norm of the whole model's gradients. The gradients are
  // clipped to `max_norm` by the time update() applies them.
  virtual double norm() = 0;
  // "" when `loss` and `norm` are finite, else what is not (nan_guard.h), naming the first
  // non-finite gradient of any rank. Every rank calls it alike.
  virtual std::string nonfinite(double loss, double norm) = 0;
  // AdamW at `lr` when `apply` (not a skipped step), then the gradients cleared.
  virtual void update(double lr, double norm, bool apply) = 0;
};

// Every rank holds whole gradients after the reduction: AdamW updates them all. `experts` (expert
// parallelism): the expert-parallel group, whose ranks hold the other experts; the norm counts each
// expert once (parallel/expert.h). Null: every parameter is here.
std::unique_ptr<OptimizerStep> replicated_step(const optim::NamedParameters& params, optim::AdamW& optimizer,
                                               dist::Communicator* experts, double max_norm);
// The distributed optimizer (ZeRO-1/2/3): the norm from every shard, `optimizer` updating this rank's.
// The NaN guard searches the shards' pieces over `world`.
std::unique_ptr<OptimizerStep> sharded_step(optim::DistributedAdamW& sharded, optim::AdamW& optimizer,
                                            dist::Communicator& world, double max_norm);

}  // namespace tidal::train
