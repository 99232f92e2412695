#pragma once
// A dry run: the training steps of a configuration on the meta device (tensors with shapes and no
// values). The model, AdamW and the memory features are built as `tidal train` builds them
// (setup.h) and the same step code runs (step.h: every micro-batch's forward with the configured
// loss mode and recompute, backward, clipping, the optimizer update), so the meta allocator counts
// exactly the bytes the real run's allocator counts, for any model size, without touching memory.
// Where the step reads values it takes a stand-in: the loss and the gradient norm are 0, an MoE
// router sends the tokens to the experts evenly (models/moe.cpp).
#include <cstdint>
#include <vector>

#include "tidal/memory_stats.h"
#include "tidal/train/arguments.h"
#include "tidal/train/kernel_records.h"

namespace tidal::train {

// Two steps: AdamW makes its states at the first update, so the second step is the first in
// steady state (its forward and backward beside the states); the peak is the higher of the two.
inline constexpr int64_t kDryRunSteps = 2;

struct DryRun {
  // The meta allocator's statistics from the build on, as the real run's device allocator reports
  // them (peak_allocated, per-category peaks, the breakdown at the peak, reserved bytes).
  MemoryStats device;
  // Bytes the first micro-batch's forward keeps for backward (category activation, policy kept: not
  // what a recompute discards), per layer, and outside the layers (the embedding's ids, the final
  // norm, the LM head's input, the loss's statistics).
  std::vector<int64_t> activation_bytes_per_layer;
  int64_t activation_bytes_outside_layers = 0;
  int64_t steps = 0;  // steps run: kDryRunSteps, or --train-iters when fewer
  // The kernels of the last step run (the second: the steady state), as the meta device's cost
  // kernels report them, tagged with phase, layer and module (kernel_records.h): the cost model's input.
  std::vector<StepKernel> kernels;
};

// Dry-runs `args` in this process on one rank. The data are mock tokens of the configured micro-batch
// shape and vocabulary (--data-path, the built-in corpus and a tokenizer are not read). Refuses, with
// tidal::Error, what it cannot account yet: --activation-offload and --swap-optimizer (their host
// side), sharding (--use-distributed-optimizer), --load and --pretrained (values).
DryRun dry_run(const TrainArgs& args);

}  // namespace tidal::train
