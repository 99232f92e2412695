#pragma once
// `tidal train --profile DIR [--profile-steps A:B]`: the window and the profile's header
// (docs/profiling.md). The profiler itself is tidal/profile/profiler.h.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "tidal/models/config.h"
#include "tidal/profile/profiler.h"
#include "tidal/train/arguments.h"

namespace tidal::train {

// The steps to profile: --profile-steps, else the second step this run makes (the first one when
// it makes only one). `start` is the iteration training resumes from (0 without --load).
profile::ProfileOptions profile_options(const TrainArgs& args, int64_t start);
// Model, batch and settings, for the report's header (the planner adds its advice: TrainHooks::advice).
nlohmann::json profile_info(const TrainArgs& args, const models::ModelConfig& config, int64_t num_parameters);

}  // namespace tidal::train
