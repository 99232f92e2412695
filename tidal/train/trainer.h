#pragma once
// The training loop of `tidal train`: data, model, AdamW with warmup + cosine decay, gradient
// accumulation and clipping, Megatron-style log lines, evaluation, checkpoints that resume bit for
// bit, --metrics-json, and a memory summary at the end. docs/training.md is the user guide.
#include <cstdio>

#include "tidal/dist/communicator.h"
#include "tidal/train/arguments.h"

namespace tidal::train {

struct TrainResult {
  int64_t iterations = 0;          // optimizer steps completed (including those before a --load)
  double final_loss = 0;           // training loss of the last step
  double final_val_loss = 0;       // NaN when there is no validation split
  std::vector<double> losses;      // training loss of every step run in this process
  std::string sample;              // generated text (when a prompt was given)
  int64_t skipped_iterations = 0;  // steps --skip-nonfinite-steps skipped (nan_guard.h)
};

// Runs training as configured, printing progress to `out`. Throws tidal::Error (tidal::OutOfMemory
// past a device limit) with a message saying what to do.
TrainResult run_training(const TrainArgs& args, std::FILE* out = stdout);
// The same on the ranks of `comm` (data parallel, docs/distributed.md): every rank calls it; rank 0
// prints to `out` and writes --metrics-json, --save and --profile; the other ranks print nothing.
TrainResult run_training(const TrainArgs& args, std::FILE* out, dist::Communicator& comm);

}  // namespace tidal::train
