// After the first steps a training step allocates nothing from the system: every tensor, gradient,
// AdamW state, offloaded copy and staging buffer of steps 3 and 4 comes from the caching
// allocators' blocks (issue 11: "no allocation beyond the caching allocator after the first step").
// Counted by the allocators themselves (system_allocs), for fp32 and bf16 with the memory features.
// MoE models too: their experts run as grouped products over all N x k routed rows (models/moe.cpp
// run_experts), whose sizes do not change when the per-expert token counts do.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "tests/integration/train_helpers.h"
#include "tidal/allocator.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/profile/profiler.h"
#include "tidal/train/profiling.h"
#include "tidal/train/setup.h"
#include "tidal/train/step.h"

namespace tidal::train {
namespace {

struct SystemAllocs {
  int64_t device = 0, host = 0;
};

SystemAllocs system_allocs() {
  return {device_allocator(Device::cpu()).stats().system_allocs, host_allocator(Device::cpu()).stats().system_allocs};
}

struct Allocations {
  SystemAllocs first_steps, later_steps;  // steps 1-2, steps 3-4
};

// Runs steps 1-2, then 3-4, of `flags` in this process; the system allocations each pair made.
Allocations allocations_by_step(const std::vector<std::string>& flags) {
  const TrainArgs args = parse_train_args(
      with({"--mock-data", "--seq-length", "64", "--micro-batch-size", "2", "--global-batch-size", "4", "--train-iters",
            "4", "--lr-warmup-iters", "0", "--eval-interval", "0", "--log-interval", "100", "--no-progress"},
           flags));
  device_allocator(Device::cpu()).empty_cache();  // a fresh process's caches: the last configuration's are warm
  host_allocator(Device::cpu()).empty_cache();
  models::ModelConfig config = args.model;
  dist::SingleCommunicator comm;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> quiet(std::fopen("/dev/null", "w"), std::fclose);
  Setup s = setup_training(args, config, quiet.get(), comm);
  profile::Profiler profiler(profile_options(args, 0), nlohmann::json::object());
  SavedTensors saved;
  const SystemAllocs start = system_allocs();
  SystemAllocs before;
  for (int64_t it = 1; it <= 4; ++it) {
    if (it == 3) before = system_allocs();
    profiler.begin_step(it);
    train_step(it, args, s, profiler, saved, [](int64_t) {});
    profiler.end_step(it, nullptr);
  }
  const SystemAllocs after = system_allocs();
  return {{before.device - start.device, before.host - start.host},
          {after.device - before.device, after.host - before.host}};
}

const std::vector<std::vector<std::string>> kConfigurations = {
    {"--model", "tiny-gpt2"},
    {"--model", "tiny-gpt2", "--bf16"},
    {"--model", "tiny-qwen3", "--bf16", "--recompute-granularity", "selective", "--loss-compute-mode", "chunk",
     "--loss-chunk-size", "32"},
    {"--model", "tiny-llama", "--bf16", "--recompute-granularity", "full", "--recompute-method", "uniform",
     "--recompute-num-layers", "1"},
    {"--model", "tiny-gpt2", "--bf16", "--activation-offload", "--offload-policy", "all"},
    {"--model", "tiny-gpt2", "--swap-optimizer", "--swap-optimizer-times", "2"},
    {"--model", "tiny-qwen3-moe"},
    {"--model", "tiny-qwen3-moe", "--bf16", "--recompute-modules", "moe_act"},
    {"--model", "tiny-deepseek-v3", "--bf16"},
};

TEST(SteadyState, StepsAfterTheFirstAllocateNothingFromTheSystem) {
  for (const std::vector<std::string>& flags : kConfigurations) {
    std::string name;
    for (const std::string& f : flags) name += f + " ";
    const Allocations a = allocations_by_step(flags);
    EXPECT_GT(a.first_steps.device, 0) << name;  // the counter counts: the first steps fill the cache
    EXPECT_EQ(a.later_steps.device, 0) << name;
    EXPECT_EQ(a.later_steps.host, 0) << name;
  }
}

}  // namespace
}  // namespace tidal::train
