#include "tidal/train/profiling.h"

#include <algorithm>

namespace tidal::train {

profile::ProfileOptions profile_options(const TrainArgs& args, int64_t start) {
  profile::ProfileOptions o;
  o.dir = args.profile.dir;
  o.device = args.device;
  if (args.profile.first_step > 0) {
    o.first_step = args.profile.first_step;
    o.last_step = std::min(args.profile.last_step, args.train_iters);
  } else {
    o.first_step = o.last_step = std::min(start + 2, std::max<int64_t>(args.train_iters, start + 1));
  }
  return o;
}

nlohmann::json profile_info(const TrainArgs& args, const models::ModelConfig& config, int64_t num_parameters) {
  nlohmann::json j;
  j["model"] = config.model_type + " (" + args.model_source + ")";
  j["parameters"] = num_parameters;
  j["micro_batch"] = std::to_string(args.micro_batch_size) + " x " + std::to_string(args.seq_length) + " tokens";
  j["accumulation"] = args.grad_accumulation_steps();
  j["attention"] = name(args.attention);
  const memory::MemoryConfig& mem = args.memory;
  j["recompute"] = mem.recompute.describe();
  if (mem.loss.chunked) j["loss"] = mem.loss.describe();
  if (mem.offload.enabled) j["offload"] = mem.offload.describe();
  if (mem.swap_optimizer.on) j["swap_optimizer"] = mem.swap_optimizer.requested_times();  // windows
  return j;
}

}  // namespace tidal::train
