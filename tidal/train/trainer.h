#pragma once
// The training loop of `tidal train`: data, model, AdamW with warmup + cosine decay, gradient
// accumulation and clipping, Megatron-style log lines, evaluation, checkpoints that resume bit for
// bit, --metrics-json, and a memory summary at the end. docs/training.md is the user guide.
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "tidal/allocator.h"
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

// What a caller adds around the loop without the trainer knowing it: the planner's (plan/training.h,
// which `tidal train` runs) chooses --auto-memory's configuration, writes the advice into a profile's
// header and turns an out-of-memory error into one with the next steps. Each may be left empty.
struct TrainHooks {
  // Before anything is built: the settings to train with (--auto-memory), announced on `out`. Every
  // rank of `comm` calls it. The hooks' arguments have their layout bound to the run's ranks.
  std::function<TrainArgs(const TrainArgs& args, dist::Communicator& comm, std::FILE* out)> choose;
  // The profile header's "advice" for the model as resolved (its vocabulary the tokenizer's).
  std::function<nlohmann::json(const TrainArgs& args, const models::ModelConfig& model)> advice;
  // The message an out-of-memory error is rethrown with, for the model as resolved.
  std::function<std::string(const OutOfMemory& e, const TrainArgs& args, const models::ModelConfig& model)>
      out_of_memory;
};

// Runs training as configured, printing progress to `out`. Throws tidal::Error (tidal::OutOfMemory
// past a device limit) with a message saying what to do. --auto-memory needs `hooks.choose`.
TrainResult run_training(const TrainArgs& args, std::FILE* out = stdout, const TrainHooks& hooks = {});
// The same on the ranks of `comm` (data parallel, docs/distributed.md): every rank calls it; rank 0
// prints to `out` and writes --metrics-json, --save and --profile; the other ranks print nothing.
TrainResult run_training(const TrainArgs& args, std::FILE* out, dist::Communicator& comm, const TrainHooks& hooks = {});

}  // namespace tidal::train
