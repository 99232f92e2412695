#pragma once
// Megatron's --check-for-nan-in-loss-and-grad (on by default): after the micro-batches' backward and
// before the optimizer step, the loss and the gradient norm must be finite. A step that is not stops
// training (exit 1) naming the iteration and the first parameter whose gradient went bad, before any
// weight took the update; with --skip-nonfinite-steps the step is skipped instead (no update, logged
// and counted in --metrics-json). Checkpoints refuse non-finite weights whatever the flags
// (checkpoint.h).
#include <cstdint>
#include <string>

#include "tidal/dist/communicator.h"
#include "tidal/optim/adamw.h"
#include "tidal/train/arguments.h"

namespace tidal::train {

// "" when `loss` and `grad_norm` are finite; otherwise what is not, naming the first parameter of
// `params` whose gradient is not finite: "the gradient norm is inf (first non-finite gradient: w)".
// Sharded (`comm` set, `params` this rank's shard pieces): a collective, naming the first non-finite
// piece of any rank (the shards lie in parameter order, so in rank order).
std::string nonfinite_step(double loss, double grad_norm, const optim::NamedParameters& params,
                           dist::Communicator* comm = nullptr);

// The tidal::Error that stops training at iteration `it` because of `what` (nonfinite_step's text),
// with what to try: when `params` (this rank's weights) hold a non-finite value already, the weights
// the run started from are at fault (a corrupt --pretrained directory or checkpoint), which no --lr
// fixes; else the learning-rate advice.
[[noreturn]] void stop_nonfinite(int64_t it, const std::string& what, const TrainArgs& args,
                                 const optim::NamedParameters& params);

}  // namespace tidal::train
