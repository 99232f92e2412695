#include "tidal/train/update.h"

#include "tidal/parallel/expert.h"
#include "tidal/train/nan_guard.h"

namespace tidal::train {
namespace {

class ReplicatedStep final : public OptimizerStep {
 public:
  ReplicatedStep(const optim::NamedParameters& params, optim::AdamW& optimizer, dist::Communicator* experts,
                 double max_norm)
      : params_(params), optimizer_(optimizer), experts_(experts), max_norm_(max_norm) {}
  // A non-finite norm leaves the gradients unscaled (grad_clip.h): the NaN guard sees them as they are.
  double norm() override { return parallel::clip_grad_norm(params_, experts_, max_norm_); }
  std::string nonfinite(double loss, double norm) override { return nonfinite_step(loss, norm, params_); }
  void update(double lr, double, bool apply) override {
    if (apply) optimizer_.step(lr);
    optimizer_.zero_grad();
  }

 private:
  optim::NamedParameters params_;
  optim::AdamW& optimizer_;
  dist::Communicator* experts_;
  double max_norm_;
};

class ShardedStep final : public OptimizerStep {
 public:
  ShardedStep(optim::DistributedAdamW& sharded, optim::AdamW& optimizer, dist::Communicator& world, double max_norm)
      : sharded_(sharded), optimizer_(optimizer), world_(world), max_norm_(max_norm) {}
  double norm() override { return sharded_.finish_reduction(); }  // from every shard
  // Sharded, the whole gradients are gone: the shards' pieces name the culprit.
  std::string nonfinite(double loss, double norm) override {
    return nonfinite_step(loss, norm, sharded_.shard_parameters(), &world_);
  }
  void update(double lr, double norm, bool apply) override {
    if (apply) sharded_.update(lr, max_norm_, norm, optimizer_);
    sharded_.finish_step();
  }

 private:
  optim::DistributedAdamW& sharded_;
  optim::AdamW& optimizer_;
  dist::Communicator& world_;
  double max_norm_;
};

}  // namespace

std::unique_ptr<OptimizerStep> replicated_step(const optim::NamedParameters& params, optim::AdamW& optimizer,
                                               dist::Communicator* experts, double max_norm) {
  return std::make_unique<ReplicatedStep>(params, optimizer, experts, max_norm);
}

std::unique_ptr<OptimizerStep> sharded_step(optim::DistributedAdamW& sharded, optim::AdamW& optimizer,
                                            dist::Communicator& world, double max_norm) {
  return std::make_unique<ShardedStep>(sharded, optimizer, world, max_norm);
}

}  // namespace tidal::train
