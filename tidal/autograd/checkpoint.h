#pragma once
// Activation checkpointing, non-reentrant (PyTorch's checkpoint with use_reentrant=False), built on
// saved-tensor hooks. See Note [Checkpoint] in checkpoint.cpp and docs/autograd.md.
#include <functional>
#include <vector>

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

// Number of checkpoint replays run in this process (for tests and the profiler).
int64_t checkpoint_replay_count();

}  // namespace tidal::autograd
