#pragma once
// `tidal train --auto-memory`: the run trains with `tidal plan`'s choice (plan/search.h) — the
// memory flags, micro-batch (same global batch) and sharding that fit the device's memory less 10%
// headroom and train fastest by the cost model — printed before training starts. Every rank makes the
// same choice (the search is deterministic: dry runs and a cost model, no measurement).
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "tidal/dist/communicator.h"
#include "tidal/plan/device_profile.h"
#include "tidal/train/arguments.h"

namespace tidal::plan {

// The profile given by name or file (--device-profile), else this machine's calibrated file
// (kDefaultDeviceProfileFile) when it exists, else nullopt.
std::optional<DeviceProfile> saved_device_profile(const std::string& device_profile);
// The profile that times the candidates: saved_device_profile, else a calibration of this machine now
// (announced on `out`).
DeviceProfile auto_memory_profile(const std::string& device_profile, std::FILE* out);

// `args` with the chosen configuration in place of its memory flags, micro-batch and sharding, for a
// run on the ranks of args.parallel, announced on `out`. Throws tidal::Error when there is no budget
// (no --auto-memory-budget and no device limit) or nothing fits (saying what the smallest candidate
// needs and what dominates).
train::TrainArgs auto_memory_choice(const train::TrainArgs& args, std::FILE* out);
// The same on the ranks of `comm` (args.parallel bound to them): under mpirun rank 0 searches and
// every rank trains with its choice (and fails with its error).
train::TrainArgs apply_auto_memory(const train::TrainArgs& args, dist::Communicator& comm, std::FILE* out);

// For the out-of-memory message of a run without --auto-memory: the search's choice for the device's
// `limit` (the fastest configuration that fits it, on --device-profile or this machine's calibrated
// file) on the ranks of args.parallel, or, without a profile, how to get it. "" when there is no limit.
std::string planner_advice(const train::TrainArgs& args, int64_t limit);

}  // namespace tidal::plan
