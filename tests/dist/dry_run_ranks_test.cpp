// The dry run of one rank of N (plan/dry_run.h, dist/meta_communicator.h), in this rank's process,
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
#include "tidal/plan/auto_memory.h"
#include "tidal/plan/dry_run.h"
#include "tidal/plan/training.h"
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
      const train::TrainArgs args = args_for(2, 2 * 2 * world.size(), "", model, flags, 2);  // 2 micro-batches per rank
      Allocator& cpu = device_allocator(Device::cpu());
      const MemoryStats device = cpu.stats(), host = host_allocator().stats();
      std::FILE* quiet = std::fopen("/dev/null", "w");
      train::run_training(args, quiet, world);
      std::fclose(quiet);
      const MemoryStats real_device = testing::peaks_since(device, cpu.stats());
      const MemoryStats real_host = testing::peaks_since(host, host_allocator().stats());
      const plan::DryRun dry = plan::dry_run(args.on(world.size()), world.rank());
      EXPECT_EQ(dry.rank, world.rank());
      testing::expect_same_peaks(dry.device, real_device, what + " (device)");
      testing::expect_same_peaks(dry.host, real_host, what + " (host)");
    }
  }
}

// --auto-memory on four ranks under budgets only expert parallelism (a MoE model with wide experts) or
// context parallelism (a dense model at 4096 tokens) fits (tests/integration/plan_parallel_test.cpp):
// the run trains with E or C > 1, within the budget, below the run as given, and its per-rank peaks are the dry run's
// of the choice — every category for context parallelism without --overlap-grad-reduce (with it the reductions' timing
// moves the gradients' peak), the parameters, gradients and AdamW states for expert parallelism (a real router's uneven
// split moves the activations).
TEST(DryRunRanks, AutoMemoryAppliesExpertAndContextParallelismOnFourRanks) {
  dist::Communicator& world = dist::world();
  if (world.size() != 4) GTEST_SKIP() << "runs on four ranks (ctest dist4)";
  struct Case {
    std::string model;
    std::vector<std::string> flags;
    bool experts;
    int64_t budget;
  };
  const std::vector<Case> cases = {
      {"tiny-qwen3-moe", {"--moe-ffn-hidden-size", "1024", "--auto-memory-budget", "10MiB"}, true, 10 << 20},
      {"tiny-llama", {"--max-position-embeddings", "4096", "--auto-memory-budget", "16MiB"}, false, 16 << 20},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.model);
    std::vector<std::string> flags = c.flags;
    flags.insert(flags.end(), {"--auto-memory", "--device-profile", "a100"});
    const int64_t seq = c.experts ? 64 : 4096, micro = c.experts ? 2 : 1;
    const train::TrainArgs given = args_for(micro, micro * 4, "", c.model, flags, 2, seq);
    std::FILE* quiet = std::fopen("/dev/null", "w");
    const train::TrainArgs chosen = plan::auto_memory_choice(given.on(4), quiet);
    if (c.experts) {
      EXPECT_GT(chosen.parallel.expert, 1);
    } else {
      EXPECT_GT(chosen.parallel.context, 1);
    }
    Allocator& cpu = device_allocator(Device::cpu());
    const MemoryStats before = cpu.stats();
    plan::run_training(given, quiet, world);  // --auto-memory: trains with `chosen`
    std::fclose(quiet);
    const MemoryStats real = testing::peaks_since(before, cpu.stats());
    train::TrainArgs dry_args = chosen;
    dry_args.parallel.overlap_grad_reduce = false;  // a dry run refuses it (its peak is the estimator's)
    const plan::DryRun dry = plan::dry_run(dry_args.on(4), world.rank());
    if (!c.experts && !chosen.parallel.overlap_grad_reduce) {
      testing::expect_same_peaks(dry.device, real, "device");
    } else {  // the state each rank holds: its experts, its shard
      for (MemoryCategory m : {MemoryCategory::parameter, MemoryCategory::optimizer_state})
        EXPECT_EQ(real[m].peak, dry.device[m].peak) << category_name(m);
      if (c.experts) {
        EXPECT_EQ(real[MemoryCategory::gradient].peak, dry.device[MemoryCategory::gradient].peak);
      }
    }
    // The choice trains within the budget (an --overlap-grad-reduce choice's peak is its dry run without
    // the overlap plus the buckets the estimator adds).
    EXPECT_LE(real.peak_allocated, c.budget);
    train::TrainArgs whole = given;  // without the choice: every expert, whole sequences
    whole.auto_memory = false;
    EXPECT_LT(real.peak_allocated, plan::dry_run(whole.on(4), world.rank()).device.peak_allocated);
  }
}

}  // namespace
}  // namespace tidal::train
