#pragma once
// `tidal train` as the command runs it: the training loop (train/trainer.h) with the planner around
// it — --auto-memory's choice of configuration before anything is built (plan/auto_memory.h), the
// triage advice in a profile's header, and an out-of-memory error rethrown with the breakdown, the
// next steps in the triage order and the search's choice for the device's limit (plan/oom_advice.h).
// The trainer knows none of this: it runs the hooks it is given.
#include <cstdio>

#include "tidal/dist/communicator.h"
#include "tidal/train/trainer.h"

namespace tidal::plan {

// The planner's hooks for train::run_training.
train::TrainHooks training_hooks();

// train::run_training with training_hooks(), on every rank of `comm` (dist::world() without one).
train::TrainResult run_training(const train::TrainArgs& args, std::FILE* out = stdout);
train::TrainResult run_training(const train::TrainArgs& args, std::FILE* out, dist::Communicator& comm);

}  // namespace tidal::plan
