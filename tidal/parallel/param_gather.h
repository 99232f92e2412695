#pragma once
// ZeRO-3 (--data-parallel-sharding-strategy optim_grads_params; docs/distributed.md): each rank keeps
// only its shard of the parameters (optim::DistributedAdamW with shard_parameters); a layer's whole
// parameters exist only while it computes:
//   - forward: gathered from every rank just before the layer runs, freed right after it;
//   - backward: gathered when the gradient of the layer's output is complete (a pre-hook on the node
//     that made the output, the layer's first in backward), freed when the gradient of its input is
//     (the layer's backward is then done);
//   - a recompute replay of the layer (full recompute) gathers them again before it runs, and they
//     stay for the layer's backward that follows.
// The parameters outside the layers (embeddings, final norm, LM head) stay gathered through a whole
// micro-batch (Scope). Gathers are collectives, so every rank must gather the same layers in the same
// order: forward visits the layers in order, and the backward hooks fire in the order the layers'
// gradients complete, the same on every rank.
// With --overlap-param-gather the exchanges run on a "gather" stream (its own duplicate communicator,
// in the order they were asked for, the same on every rank): in forward the next layer's parameters
// are gathered while the current layer computes, in backward the layer below's, so two layers' whole
// parameters are present at a time. Expert parallel: a layer's experts are gathered from their
// expert-data-parallel group (the optimizer's expert shards), after its dense parameters from every rank.
// LoRA: the trained adapters are the optimizer's shards, the frozen base is sharded by a DistributedAdamW of its own
// that never steps (no gradients, no AdamW states); a layer's gather brings both.
#include <cstdint>
#include <memory>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/event.h"
#include "tidal/models/causal_lm.h"
#include "tidal/optim/distributed_adamw.h"
#include "tidal/stream.h"

namespace tidal::parallel {

class ParamGather final : public models::LayerParamHooks {
 public:
  // Hooks into the model and frees every parameter's whole bytes (the shard keeps this rank's). `sharded`: the
  // shardings that together hold every parameter of the model once (the optimizer's; with LoRA also the frozen
  // base's). `overlap`: prefetch on a stream, over a duplicate of `comm` (a collective).
  ParamGather(models::CausalLM& model, const std::vector<optim::DistributedAdamW*>& sharded, dist::Communicator& comm,
              bool overlap);
  ~ParamGather() override;  // unhooks
  ParamGather(const ParamGather&) = delete;
  ParamGather& operator=(const ParamGather&) = delete;

  // A forward (and its backward): the parameters outside the layers gathered for its duration, and
  // every parameter still gathered freed at its end. `whole`: every layer's too, kept through the
  // scope (a checkpoint's model.safetensors, text generation). Does nothing without a ParamGather.
  class Scope {
   public:
    explicit Scope(ParamGather* gather, bool whole = false);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    ParamGather* gather_;
  };

  // Parameter groups gathered so far; time gathering (on the stream with overlap) and the part of it
  // the compute thread waited for.
  struct Stats {
    int64_t gathers = 0, busy_ns = 0, exposed_ns = 0;
  };
  const Stats& stats() const { return stats_; }

  void before_layers(const Tensor& input) override;
  void before_layer(int64_t layer) override;
  void after_layer(int64_t layer, const Tensor& output) override;

 private:
  enum class State : char { released, in_flight, gathered };
  void gather(size_t unit);    // present when it returns
  void prefetch(size_t unit);  // with overlap: started, not waited for
  void start(size_t unit);
  void release(size_t unit);
  void release_all();

  // A unit's parameters in one sharding: indexes into its parameters().
  struct Part {
    optim::DistributedAdamW* sharded;
    std::vector<size_t> params;
  };
  bool empty(size_t unit) const { return units_[unit].empty(); }

  models::CausalLM& model_;
  std::vector<optim::DistributedAdamW*> sharded_;
  std::vector<std::vector<Part>> units_;                    // [0] outside the layers, [1 + l] layer l (non-empty parts)
  std::vector<State> state_;                                // per unit
  std::vector<Event> done_;                                 // per unit in flight: its exchange
  bool pinned_ = false;                                     // a whole Scope: layers stay gathered
  std::unique_ptr<dist::Communicator> stream_comm_;         // with overlap
  std::unique_ptr<dist::Communicator> stream_expert_comm_;  // with overlap and expert parallelism
  std::unique_ptr<Stream> stream_;
  Stats stats_;
};

}  // namespace tidal::parallel
