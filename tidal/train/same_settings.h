#pragma once
// Every rank of a run must train with the same settings: different layer counts or sharding flags would
// deadlock in the first collective, different seeds train diverging replicas, different iteration counts end
// in a parse error on rank 0. check_same_settings compares them before anything else is collective.
#include "tidal/dist/communicator.h"
#include "tidal/train/arguments.h"

namespace tidal::train {

// Each rank's settings (TrainArgs::to_json, without the per-rank ones: the device, the profile directory that
// only rank 0 writes, and paths, which may differ by node) against rank 0's. A collective: every rank calls it, and on
// a difference every rank throws the same tidal::Error naming the first setting that differs, the ranks and both
// values.
void check_same_settings(const TrainArgs& args, dist::Communicator& comm);

}  // namespace tidal::train
