#pragma once
// --load (setup.h): the weights, the optimizer's states, the iteration, the data position and the
// generator's state of the latest checkpoint under the directory, read by every rank as its layout
// holds them (checkpoint/rank_state.h), whatever layout saved it.
#include <cstdio>

#include "tidal/models/config.h"
#include "tidal/train/arguments.h"
#include "tidal/train/setup.h"

namespace tidal::train {

// A directory with no complete checkpoint (no tracker file) starts fresh with a warning on `out`, as
// Megatron-LM does, unless --exit-on-missing-checkpoint. Every rank reads what it needs; a failure on
// one fails every rank, and ranks that do not find the same checkpoint (no shared filesystem) fail too.
// Checks the checkpoint's model and precision against `config` (throws naming the file).
void resume(const TrainArgs& args, const models::ModelConfig& config, Setup& s, std::FILE* out);

}  // namespace tidal::train
