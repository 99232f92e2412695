#pragma once
// Activation checkpointing, non-reentrant (PyTorch's checkpoint with use_reentrant=False), built on
// saved-tensor hooks. See Note [Checkpoint] in checkpoint.cpp and docs/autograd.md.
#include <functional>
#include <vector>

#include "tidal/autograd/saved_tensor.h"
#include "tidal/rng.h"
#include "tidal/tensor.h"

namespace tidal::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Runs fn(inputs) with normal autograd history but keeps only `inputs` for backward: every tensor
// that fn's ops save is dropped at once. The first time backward needs one of them, fn is replayed
// from the inputs, with the RNG state of the first run (dropout masks are identical), and the
// replay's saved tensors are served instead. Gradients are bitwise identical to running fn plainly.
// fn must run the same ops on the replay (no control flow that depends on global state changing).
std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input);

// A decision a checkpointed function takes from data (e.g. which experts a token is routed to).
// Inside a checkpoint's first run, compute() runs and its result is recorded; inside a replay the
// recorded result is returned instead (compute() does not run), so the replay takes exactly the
// decisions of the first run. Outside any checkpoint it just returns compute().
Tensor checkpoint_decision(const std::function<Tensor()>& compute);
// Whether the calling code runs inside a checkpoint replay (backward's recompute).
bool in_checkpoint_replay();
// Whether checkpoint_decision would record its result now (a checkpoint's first run): the result then stays
// until the checkpoint's backward.
bool recording_decisions();

namespace detail {

// The start of every replay (checkpoint, output-discarding checkpoint): the saved inputs as fresh
// leaves, each requiring grad as it did in the first run. `who` names the replay in errors.
std::vector<Tensor> replay_leaves(std::vector<SavedTensor>& inputs, const std::vector<bool>& requires_grad,
                                  const char* who);

// The first run's RNG state for the lifetime of the guard (dropout draws the same masks); the
// caller's state comes back at its end, also when the replay throws.
class ReplayRng {
 public:
  explicit ReplayRng(const RngState& first_run) : outer_(get_rng_state()) { set_rng_state(first_run); }
  ~ReplayRng() { set_rng_state(outer_); }
  ReplayRng(const ReplayRng&) = delete;
  ReplayRng& operator=(const ReplayRng&) = delete;

 private:
  RngState outer_;
};

}  // namespace detail

// Number of checkpoint replays run in this process (for tests and the profiler).
int64_t checkpoint_replay_count();
// Time spent recomputing (checkpoint replays and output-discarding recomputes), in nanoseconds.
int64_t recompute_time_ns();
void add_recompute_time(int64_t ns);

}  // namespace tidal::autograd
