// The dry run of one rank of N (train/dry_run.h, dist/meta_communicator.h), in this rank's process,
// against this rank's real run on the same flags: the device and host allocators' peaks, per
// category, to the byte — for every sharding strategy, --overlap-param-gather, --bf16, accumulation,
// and offload and the swap optimizer over sharded states. Run as 1 process (ctest dist1) and as 2 and
// 3 ranks (dist2, dist3), where the ranks' shards differ.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/dist/train_runs.h"
#include "tests/support/peaks_since.h"
#include "tidal/allocator.h"
#include "tidal/train/dry_run.h"
#include "tidal/train/trainer.h"

namespace tidal::train {
namespace {

TEST(DryRunRanks, EachRanksPeaksEqualItsRealRun) {
  dist::Communicator& world = dist::world();
  const std::vector<std::vector<std::string>> runs = {
      {},
      {"--use-distributed-optimizer"},
      {"--data-parallel-sharding-strategy", "optim_grads"},
      {"--data-parallel-sharding-strategy", "optim_grads_params"},
      {"--data-parallel-sharding-strategy", "optim_grads_params", "--overlap-param-gather"},
      {"--data-parallel-sharding-strategy", "optim_grads", "--bf16"},
      {"--data-parallel-sharding-strategy", "optim_grads_params", "--bf16", "--recompute-granularity", "selective"},
      {"--use-distributed-optimizer", "--swap-optimizer", "--swap-optimizer-times", "2"},
      {"--data-parallel-sharding-strategy", "optim_grads", "--activation-offload", "--recompute-granularity", "full",
       "--recompute-method", "uniform", "--recompute-num-layers", "1"},
  };
  for (const std::string model : {"tiny-gpt2", "tiny-llama"}) {
    for (const std::vector<std::string>& flags : runs) {
      std::string what = model + " on rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size());
      for (const std::string& f : flags) what += " " + f;
      const TrainArgs args = args_for(2, 2 * 2 * world.size(), "", model, flags, 2);  // 2 micro-batches per rank
      Allocator& cpu = device_allocator(Device::cpu());
      const MemoryStats device = cpu.stats(), host = host_allocator().stats();
      std::FILE* quiet = std::fopen("/dev/null", "w");
      run_training(args, quiet, world);
      std::fclose(quiet);
      const MemoryStats real_device = testing::peaks_since(device, cpu.stats());
      const MemoryStats real_host = testing::peaks_since(host, host_allocator().stats());
      const DryRun dry = dry_run(args, world.rank(), world.size());
      EXPECT_EQ(dry.rank, world.rank());
      testing::expect_same_peaks(dry.device, real_device, what + " (device)");
      testing::expect_same_peaks(dry.host, real_host, what + " (host)");
    }
  }
}

}  // namespace
}  // namespace tidal::train
