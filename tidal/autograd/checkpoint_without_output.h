#pragma once
// Output-discarding recompute (MindSpeed-LLM's CheckpointWithoutOutput), for cheap ops whose output a
// consumer saves anyway: an activation function's output saved by the down projection, a norm's
// output saved by the projections after it. See Note [Output-discarding recompute] in the .cpp.
//
//   autograd::CheckpointWithoutOutput ck;
//   Tensor a = ck.run([](const Tensor& h) { return gelu(h); }, h);   // like gelu(h)
//   Tensor y = linear(a, w);                                           // saves a
//   ck.discard_outputs();                                              // a's bytes are freed
//   ck.recompute_before_backward_of(y);                                // back just before y's backward
#include <functional>
#include <memory>
#include <vector>

#include "tidal/autograd/checkpoint.h"
#include "tidal/tensor.h"

namespace tidal::autograd {

class CheckpointWithoutOutput {
 public:
  CheckpointWithoutOutput();

  // Runs fn(inputs) without recording its internals (nothing inside is saved) and returns its
  // outputs, differentiable with respect to `inputs` and to the parameters fn uses. The inputs are
  // saved (through the active saved-tensor hooks). Call once.
  std::vector<Tensor> run(const CheckpointFn& fn, const std::vector<Tensor>& inputs);
  Tensor run(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

  // Frees the bytes of the outputs. Call after every consumer has saved them: the consumers keep the
  // same Storage objects, which come back rematerialized before they are needed.
  void discard_outputs();
  // Recomputes the outputs just before the backward of the node that produced `consumer_output`
  // (the first such consumer to run triggers it; later ones find the bytes back).
  void recompute_before_backward_of(const Tensor& consumer_output);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

// The usual pattern in one call: fn's outputs feed `consume`, which saves them; they are discarded
// right after, and recomputed before the backward of whichever of consume's results comes first.
// With `enabled` false it is simply consume(fn(inputs)).
std::vector<Tensor> with_discarded_outputs(
    bool enabled, const CheckpointFn& fn, const std::vector<Tensor>& inputs,
    const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& consume);

// Recomputations done by output-discarding checkpoints in this process (tests, profiler).
int64_t output_recompute_count();

}  // namespace tidal::autograd
