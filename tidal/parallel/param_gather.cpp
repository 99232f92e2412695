#include "tidal/parallel/param_gather.h"

#include "tidal/autograd/checkpoint.h"
#include "tidal/autograd/engine.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/autograd/node.h"
#include "tidal/base/clock.h"
#include "tidal/base/error.h"

namespace tidal::parallel {

ParamGather::ParamGather(models::CausalLM& model, const std::vector<optim::DistributedAdamW*>& sharded,
                         dist::Communicator& comm, bool overlap)
    : model_(model), sharded_(sharded) {
  const int64_t layers = model.config().num_hidden_layers;
  units_.resize(size_t(1 + layers));
  size_t held = 0;
  dist::Communicator* expert_data = nullptr;
  for (optim::DistributedAdamW* s : sharded_) {
    TIDAL_ASSERT(s->shards_parameters(), "[ZeRO-3] a distributed optimizer does not shard the parameters");
    std::vector<std::vector<size_t>> by_unit(units_.size());
    const optim::NamedParameters& params = s->parameters();
    for (size_t i = 0; i < params.size(); ++i)
      by_unit[size_t(1 + model.layer_of_parameter(params[i].first))].push_back(i);
    for (size_t u = 0; u < units_.size(); ++u)
      if (!by_unit[u].empty()) units_[u].push_back({s, std::move(by_unit[u])});
    held += params.size();
    if (s->expert_data()) expert_data = s->expert_data();
  }
  TIDAL_ASSERT(held == model.named_parameters().size(), "[ZeRO-3] the shardings hold ", held, " parameters, the model ",
               model.named_parameters().size());
  state_.assign(units_.size(), State::gathered);  // the model starts whole
  done_.resize(units_.size());
  release_all();
  if (overlap) {
    stream_comm_ = comm.duplicate();
    if (expert_data) stream_expert_comm_ = expert_data->duplicate();
    stream_ = std::make_unique<Stream>("gather");
  }
  model_.set_layer_param_hooks(this);
  // A backward node of a layer whose parameters are not here would read freed bytes: stop instead.
  autograd::set_backward_node_check([this](int layer) {
    TIDAL_CHECK(layer < 0 || size_t(layer) + 1 >= units_.size() || state_[size_t(layer) + 1] == State::gathered ||
                    empty(size_t(layer) + 1),
                "[ZeRO-3] the backward of layer ", layer,
                " ran while its parameters were not gathered (an unexpected order of the backward); "
                "use --data-parallel-sharding-strategy optim_grads instead and report this");
  });
}

ParamGather::~ParamGather() {
  stream_.reset();  // finishes the exchanges in flight (they write into the parameters)
  autograd::set_backward_node_check(nullptr);
  model_.set_layer_param_hooks(nullptr);
}

void ParamGather::start(size_t unit) {
  std::vector<std::function<void()>> parts;
  for (const Part& p : units_[unit])
    parts.push_back(p.sharded->start_gather(p.params, {stream_comm_.get(), stream_expert_comm_.get()}));
  std::function<void()> exchange = [parts = std::move(parts)] {
    for (const std::function<void()>& f : parts) f();  // the same order on every rank
  };
  ++stats_.gathers;
  state_[unit] = State::in_flight;
  if (!stream_) {  // on this thread, now
    const int64_t t0 = now_ns();
    exchange();
    stats_.busy_ns += now_ns() - t0;
    stats_.exposed_ns += now_ns() - t0;
    return;
  }
  stream_->enqueue(
      [this, exchange = std::move(exchange)] {
        const int64_t t0 = now_ns();
        exchange();
        stats_.busy_ns += now_ns() - t0;  // this stream's thread only
      },
      "param_gather");
  done_[unit].record(*stream_);
}

void ParamGather::gather(size_t unit) {
  if (empty(unit) || state_[unit] == State::gathered) return;
  if (state_[unit] == State::released) start(unit);
  if (stream_) {
    const int64_t t0 = now_ns();
    done_[unit].synchronize();
    stats_.exposed_ns += now_ns() - t0;
  }
  state_[unit] = State::gathered;
}

void ParamGather::prefetch(size_t unit) {
  if (stream_ && unit < units_.size() && !empty(unit) && state_[unit] == State::released) start(unit);
}

void ParamGather::release(size_t unit) {
  if (empty(unit) || state_[unit] == State::released) return;
  if (state_[unit] == State::in_flight) gather(unit);  // its bytes are being written: wait first
  for (const Part& p : units_[unit]) p.sharded->release_parameters(p.params);
  state_[unit] = State::released;
}

void ParamGather::release_all() {
  for (size_t u = 0; u < units_.size(); ++u) release(u);
}

void ParamGather::before_layers(const Tensor& input) {
  // Layer 0's backward is done once the gradient of its input is complete.
  if (autograd::grad_enabled() && !autograd::in_checkpoint_replay() && input.grad_fn() && !pinned_)
    input.grad_fn()->add_pre_hook([this] { release(1); }, /*first=*/true);
}

void ParamGather::before_layer(int64_t layer) {
  gather(size_t(1 + layer));
  if (!autograd::in_checkpoint_replay() && !pinned_) prefetch(size_t(2 + layer));  // the next layer's
}

void ParamGather::after_layer(int64_t layer, const Tensor& output) {
  const size_t unit = size_t(1 + layer);
  if (autograd::in_checkpoint_replay() || pinned_) return;  // a replay's backward follows: keep them
  if (autograd::grad_enabled() && output.grad_fn()) {
    // The layer's backward starts when its output's gradient is complete; the layer above is done.
    output.grad_fn()->add_pre_hook(
        [this, unit] {
          if (unit + 1 < units_.size()) release(unit + 1);  // first: as few layers' parameters as possible
          gather(unit);
          if (unit > 1) prefetch(unit - 1);  // the layer below's
        },
        /*first=*/true);
  }
  release(unit);
}

ParamGather::Scope::Scope(ParamGather* gather, bool whole) : gather_(gather) {
  if (gather_ == nullptr) return;
  gather_->gather(0);
  if (!whole) return;
  for (size_t u = 1; u < gather_->units_.size(); ++u) gather_->gather(u);
  gather_->pinned_ = true;
}

ParamGather::Scope::~Scope() {
  if (gather_ == nullptr) return;
  gather_->pinned_ = false;
  gather_->release_all();
}

}  // namespace tidal::parallel
