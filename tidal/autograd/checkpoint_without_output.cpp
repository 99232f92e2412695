// Note [Output-discarding recompute]
// run() calls fn under no-grad, so fn's ops record nothing and save nothing; one node
// (CheckpointWithoutOutputBackward) stands for fn, with edges to fn's inputs, keeping the inputs as
// SavedTensors. The outputs are ordinary tensors; consumers save them as usual, i.e. they hold the
// outputs' Storage objects. discard_outputs() releases those storages' bytes (identity kept). The
// consumer's node gets a pre-hook: just before its backward, recompute() replays fn from the saved
// inputs with grad mode on (and the first run's RNG state), and moves each recomputed output's bytes
// into the original, released Storage (Storage::take_bytes: no copy, no second allocation), so the
// consumer finds its saved tensor intact. The replay's own graph is kept until the node's backward,
// which backpropagates through it: the same kernels as the plain run, so gradients are bitwise equal.
// Parameters fn uses get their gradients from that inner backward.
#include "tidal/autograd/checkpoint_without_output.h"

#include <atomic>

#include "tidal/autograd/engine.h"
#include "tidal/autograd/grad_mode.h"
#include "tidal/autograd/node.h"
#include "tidal/autograd/saved_tensor.h"
#include "tidal/base/clock.h"
#include "tidal/memory_scope.h"

namespace tidal::autograd {
namespace {
std::atomic<int64_t> g_recomputes{0};
}  // namespace

struct CheckpointWithoutOutput::State {
  CheckpointFn fn;
  std::vector<SavedTensor> inputs;
  std::vector<bool> input_requires_grad;
  RngState rng;
  int layer = -1;
  std::vector<std::weak_ptr<Storage>> outputs;  // the original outputs' storages (consumers own them)
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
  bool discarded = false;
  bool recomputed = false;
  std::vector<Tensor> replay_inputs;   // detached leaves of the replay
  std::vector<Tensor> replay_outputs;  // with the replay's graph, for the backward

  void recompute() {
    if (recomputed) return;
    replay_inputs = detail::replay_leaves(inputs, input_requires_grad, "CheckpointWithoutOutput");
    const int64_t t0 = now_ns();
    {
      detail::ReplayRng rng_guard(rng);
      GradModeGuard grad(true);
      LayerScope scope(layer);
      OpScope op("recompute_output");
      replay_outputs = fn(replay_inputs);
    }
    ++g_recomputes;
    add_recompute_time(now_ns() - t0);
    TIDAL_CHECK(replay_outputs.size() == outputs.size(), "[recompute] the replay returned ", replay_outputs.size(),
                " outputs but the first run ", outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Tensor& r = replay_outputs[i];
      TIDAL_CHECK(r.shape() == output_shapes[i] && r.dtype() == output_dtypes[i], "[recompute] output ", i,
                  " came back as ", r.shape(), " ", r.dtype(), " instead of ", output_shapes[i], " ", output_dtypes[i]);
      std::shared_ptr<Storage> orig = outputs[i].lock();
      if (!orig || orig->is_materialized()) continue;  // nobody needs it, or it was never discarded
      const std::shared_ptr<Storage>& fresh = r.storage();
      if (fresh.use_count() == 1 && r.is_contiguous() && r.offset() == 0 && fresh->nbytes() == orig->nbytes()) {
        orig->take_bytes(*fresh);  // the replay's graph does not need its output: move the bytes
      } else {
        orig->rematerialize();
        Tensor(orig, r.shape(), contiguous_strides(r.shape()), 0, r.dtype()).detach().copy_(r.detach());
      }
    }
    recomputed = true;
  }
};

namespace {

struct CheckpointWithoutOutputBackward : Node {
  std::shared_ptr<CheckpointWithoutOutput::State> state;
  const char* name() const override { return "CheckpointWithoutOutputBackward"; }
  TensorList apply(TensorList&& grads) override {
    state->recompute();
    std::vector<Tensor> outs, gs;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined() || !state->replay_outputs[i].requires_grad()) continue;
      outs.push_back(state->replay_outputs[i]);
      gs.push_back(grads[i]);
    }
    TensorList result(state->replay_inputs.size());
    if (!outs.empty()) {
      backward(outs, gs);
      for (size_t i = 0; i < result.size(); ++i)
        if (state->replay_inputs[i].defined() && state->replay_inputs[i].requires_grad())
          result[i] = state->replay_inputs[i].grad();
    }
    return result;
  }
  void release_saved() override {
    for (auto& s : state->inputs) s.reset();
    state->replay_inputs.clear();
    state->replay_outputs.clear();
  }
};

}  // namespace

CheckpointWithoutOutput::CheckpointWithoutOutput() : state_(std::make_shared<State>()) {}

std::vector<Tensor> CheckpointWithoutOutput::run(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  TIDAL_CHECK(state_->fn == nullptr, "[recompute] a CheckpointWithoutOutput runs one function once");
  State& s = *state_;
  s.fn = fn;
  s.rng = get_rng_state();
  s.layer = memory_context().layer;
  std::vector<Tensor> outs;
  {
    NoGradGuard no_grad;
    outs = fn(inputs);
  }
  for (const Tensor& o : outs) {
    s.outputs.push_back(o.storage());
    s.output_shapes.push_back(o.shape());
    s.output_dtypes.push_back(o.dtype());
  }
  if (!grad_enabled()) return outs;
  for (const Tensor& o : outs) o.storage()->set_will_recompute();
  // One node, also when no input requires grad: fn may use parameters that do.
  auto node = std::make_shared<CheckpointWithoutOutputBackward>();
  node->state = state_;
  node->set_next_edges(collect_next_edges(inputs));
  OpScope op("recompute_input");
  for (const Tensor& t : inputs) {
    s.inputs.emplace_back(t);
    s.input_requires_grad.push_back(t.defined() && t.requires_grad());
  }
  for (size_t i = 0; i < outs.size(); ++i)
    if (is_floating(outs[i].dtype())) set_history(outs[i], node, uint32_t(i));
  return outs;
}

Tensor CheckpointWithoutOutput::run(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input) {
  return run([fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; }, {input})[0];
}

void CheckpointWithoutOutput::discard_outputs() {
  if (!grad_enabled()) return;  // inference: nothing will need them again
  for (auto& w : state_->outputs)
    if (auto s = w.lock()) s->release();
  state_->discarded = true;
}

void CheckpointWithoutOutput::recompute_before_backward_of(const Tensor& consumer_output) {
  if (!consumer_output.defined() || !consumer_output.grad_fn()) return;
  std::shared_ptr<State> st = state_;
  consumer_output.grad_fn()->add_pre_hook([st] {
    if (st->discarded) st->recompute();
  });
}

std::vector<Tensor> with_discarded_outputs(
    bool enabled, const CheckpointFn& fn, const std::vector<Tensor>& inputs,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& consume) {
  if (!enabled || !grad_enabled()) return consume(fn(inputs));
  CheckpointWithoutOutput ck;
  std::vector<Tensor> results = consume(ck.run(fn, inputs));
  ck.discard_outputs();
  for (const Tensor& r : results) ck.recompute_before_backward_of(r);
  return results;
}

int64_t output_recompute_count() { return g_recomputes.load(); }

}  // namespace tidal::autograd
