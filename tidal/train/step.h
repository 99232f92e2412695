#pragma once
// One optimizer step of `tidal train` (trainer.h): each micro-batch's forward and backward
// (gradient accumulation), then clipping and the AdamW update, inside the profiler's phases; and the
// validation loss.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tidal/autograd/saved_tensor_record.h"
#include "tidal/profile/profiler.h"
#include "tidal/train/arguments.h"
#include "tidal/train/setup.h"

namespace tidal::train {

struct StepResult {
  double loss = 0;  // mean over the micro-batches
  double lr = 0;
  double grad_norm = 0;   // before clipping
  std::string nonfinite;  // why the step was skipped (--skip-nonfinite-steps); "" when it was taken
  // --moe-expert-capacity-factor: the (token, expert) slots of the global batch's forwards, and those
  // dropped (models/moe.h); -1 without a capacity.
  int64_t moe_slots = -1, moe_dropped = -1;
  // Under --variable-seq-lengths the tokens the step's batches held over every data-parallel rank (each
  // micro-batch B x its own T); 0 otherwise (global batch x --seq-length).
  int64_t tokens = 0;
  // --mtp-num-layers: each depth's loss, the global batch's mean (Megatron's "mtp_k loss"); empty without MTP.
  std::vector<double> mtp_losses;
};

// The tensors the run's first micro-batch saved for backward: the summary's "saved_tensors" and the
// table of --report-memory.
using SavedTensors = std::vector<autograd::SavedTensorRecord>;

// Iteration `it` (from 1). Fills `first_saved` at the first micro-batch that saves anything, hands
// the profiler the saved tensors of the micro-batches it wants, and calls `after_forward(m)` between
// micro-batch m's forward and its backward. A non-finite loss or gradient norm (nan_guard.h) throws
// tidal::Error, or skips the optimizer update with --skip-nonfinite-steps.
StepResult train_step(int64_t it, const TrainArgs& args, Setup& s, profile::Profiler& profiler,
                      SavedTensors& first_saved, const std::function<void(int64_t m)>& after_forward);

// The mean loss over --eval-iters batches of the validation split, without gradients, in eval mode.
double validation_loss(const TrainArgs& args, Setup& s);

}  // namespace tidal::train
