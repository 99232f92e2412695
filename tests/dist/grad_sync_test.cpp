// Gradient reduction (parallel/grad_sync.h): ZeRO-2 (--data-parallel-sharding-strategy optim_grads),
// which reduce-scatters after every micro-batch, and --overlap-grad-reduce, which reduces bucket by
// bucket on the "comm" stream while backward runs. Every element's sum is added in rank order and,
// under ZeRO-2, micro-batch after micro-batch in the global batch's order: bit for bit one process
// accumulating the same micro-batches, however many micro-batches each rank runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "tests/dist/train_runs.h"
#include "tests/support/error_of.h"
#include "tidal/allocator.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory_scope.h"
#include "tidal/models/causal_lm.h"
#include "tidal/ops/elementwise.h"
#include "tidal/ops/reduce.h"
#include "tidal/optim/distributed_adamw.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/parallel/grad_sync.h"
#include "tidal/parallel/groups.h"
#include "tidal/train/nan_guard.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kZero2 = {"--data-parallel-sharding-strategy", "optim_grads"};
// Buckets of about 20k elements: tiny-gpt2's 149k parameters make 8 of them.
const std::vector<std::string> kOverlap = {"--overlap-grad-reduce", "--ddp-bucket-size", "20000"};

const std::vector<std::string> kZero3 = {"--data-parallel-sharding-strategy", "optim_grads_params"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The losses are summed over each rank's micro-batches first (double precision), hence 1e-12.
TEST(ZeRO2, SeveralMicroBatchesPerRankAreBitwiseOneProcess) {
  compare("tiny-gpt2", 2, 0.0, kZero2, 1e-12);
  compare("tiny-qwen3-moe", 2, 0.0, kZero2, 1e-12);
}

TEST(OverlapGradReduce, EveryStrategyIsBitwiseOneProcess) {
  compare("tiny-gpt2", 1, 0.0, kOverlap);
  compare("tiny-llama", 1, 0.0, with(kOverlap, {"--use-distributed-optimizer"}));
  compare("tiny-gpt2", 2, 0.0, with(kOverlap, kZero2), 1e-12);
  // Experts some rank's tokens did not choose: their buckets start when backward ends.
  compare("tiny-qwen3-moe", 2, 0.0, with(kOverlap, kZero2), 1e-12);
}

// Recompute replays inside backward and accumulates into the same gradients, once per backward.
TEST(OverlapGradReduce, ComposesWithRecomputeAndOffload) {
  compare("tiny-llama", 1, 0.0,
          with(kOverlap,
               {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"}));
  compare("tiny-llama", 2, 0.0, with(with(kOverlap, kZero2), {"--recompute-activation-function", "--recompute-norm"}),
          1e-12);
  compare("tiny-gpt2", 1, 0.0, with(kOverlap, {"--activation-offload"}));
}

// ZeRO-2/3 with accumulation reduce bucket by bucket during backward without --overlap-grad-reduce, on the
// compute thread (Note [Synchronous buckets], parallel/grad_sync.cpp): tied embeddings (GPT-2's and Qwen3's
// token embedding completes last, after the LM head's part waited in backward), recompute and offload
// replaying forward inside backward, ZeRO-3's gathers between the buckets and --bf16's sums published as they
// complete: bit for bit one process, as reduced after backward. (Multi-token prediction is DeepSeek-V3's, a
// model with experts: it reduces after backward.)
TEST(SynchronousBuckets, AreBitwiseOneProcess) {
  const std::vector<std::string> small = {"--ddp-bucket-size", "20000"};
  compare("tiny-gpt2", 2, 0.0, with(kZero2, small), 1e-12);
  compare("tiny-qwen3", 2, 0.0, with(kZero3, small), 1e-12);
  compare("tiny-llama", 2, 0.0,
          with(with(kZero3, small),
               {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"}),
          1e-12);
  compare("tiny-llama", 2, 0.0, with(with(kZero2, small), {"--recompute-activation-function", "--activation-offload"}),
          1e-12);
  compare("tiny-gpt2", 2, 0.0, with(with(kZero3, small), {"--overlap-param-gather"}), 1e-12, {"--bf16"});
}

// A rank whose backward is skipped (a non-finite loss under --skip-nonfinite-steps) while the others reduce bucket
// by bucket inside theirs: at the micro-batch's end it reduces every bucket, in the same order, so the collectives
// match (no hang), and its gradients count as zeros. Every rank's gradient of micro-batch m is the constant
// 0.25 (m + 1) + r (the loss sum(p) x that); rank 1 skips micro-batch 0.
TEST(SynchronousBuckets, ARankThatSkipsItsBackwardStillMatchesTheOthers) {
  dist::Communicator& world = dist::world();
  if (world.size() < 2) GTEST_SKIP() << "needs 2 ranks";
  parallel::ParallelLayout layout;
  layout.sharding = parallel::ShardingStrategy::optim_grads;
  layout.bucket_size = 20000;  // several buckets
  layout = layout.on(world.size());
  ASSERT_TRUE(layout.reduces_by_bucket(2, false));
  const parallel::ParallelGroups groups(world, layout);
  auto model = models::create_model(models::preset("tiny-gpt2"));
  const optim::NamedParameters params = model->named_parameters();
  optim::DistributedAdamW sharded(params, world);
  {
    parallel::GradSync sync(params, groups, &sharded);
    for (int64_t m = 0; m < 2; ++m) {
      sync.begin_micro_batch(m, 2);
      if (!(m == 0 && world.rank() == 1)) {
        Tensor loss = zeros({});
        for (const auto& [name, p] : params) loss = add(loss, sum(p));
        mul(loss, 0.25 * double(m + 1) + world.rank()).backward();
      }
      sync.end_micro_batch();
    }
  }
  sharded.finish_reduction();
  double per_element = 0;
  for (int64_t m = 0; m < 2; ++m)
    for (int r = 0; r < world.size(); ++r)
      if (!(m == 0 && r == 1)) per_element += 0.25 * double(m + 1) + r;
  for (const auto& [name, piece] : sharded.shard_parameters()) {
    ASSERT_TRUE(piece.grad().defined()) << name;
    for (float v : piece.grad().to_vector<float>()) ASSERT_EQ(v, float(per_element)) << name;
  }
  sharded.finish_step();
}

// ZeRO-2 between micro-batches: the whole gradients are gone, only the shard's sums stay (4 bytes
// per element of this rank's shard), and a second micro-batch adds onto them.
TEST(ZeRO2, OnlyTheShardsSumsStayBetweenMicroBatches) {
  dist::Communicator& world = dist::world();
  auto model = models::create_model(models::preset("tiny-gpt2"));
  const optim::NamedParameters params = model->named_parameters();
  optim::DistributedAdamW sharded(params, world);
  std::vector<size_t> all(params.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  Allocator& device = device_allocator(Device::cpu());
  // Every rank's gradient of micro-batch m: a function of (m, rank) everyone can recompute.
  auto gradient_of = [](const Tensor& p, int64_t m, int r) {
    MemoryScope scope(MemoryCategory::gradient);
    return full(p.shape(), 0.25 * double(m + 1) + r);
  };
  for (int64_t m = 0; m < 2; ++m) {
    for (const auto& [name, p] : params) p.set_grad(gradient_of(p, m, world.rank()));
    const int64_t before = device.stats()[MemoryCategory::gradient].allocated;
    sharded.reduce_scatter(all);
    for (const auto& [name, p] : params) EXPECT_FALSE(p.grad().defined()) << name;
    int64_t shard = 0;
    for (const auto& [name, piece] : sharded.shard_parameters()) shard += piece.numel();
    // The whole gradients went; the shard's sums stayed (allocated at the first micro-batch).
    EXPECT_EQ(device.stats()[MemoryCategory::gradient].allocated,
              before - 4 * model->num_parameters() + (m == 0 ? 4 * shard : 0));
  }
  const double norm = sharded.finish_reduction();
  // Each element: the sum over micro-batches and ranks of 0.25 (m + 1) + r.
  double per_element = 0;
  for (int64_t m = 0; m < 2; ++m)
    for (int r = 0; r < world.size(); ++r) per_element += 0.25 * double(m + 1) + r;
  EXPECT_NEAR(norm, per_element * std::sqrt(double(model->num_parameters())), 1e-6 * norm);
  for (const auto& [name, piece] : sharded.shard_parameters()) {
    ASSERT_TRUE(piece.grad().defined()) << name;
    for (float v : piece.grad().to_vector<float>()) ASSERT_EQ(v, float(per_element)) << name;
  }
  sharded.finish_step();
}

// The comm stream's work runs while backward computes, and ZeRO-3's prefetches while the layers
// compute: the profiler's trace has a "comm" and a "gather" lane whose tasks intersect the compute lane.
TEST(OverlapGradReduce, TheCommLaneOverlapsBackward) {
  dist::Communicator& world = dist::world();
  const std::string dir = scratch_dir("overlap_profile", world.size());
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  // A backward of tens of milliseconds (small-gpt2), longer than a scheduler's time slice: the ranks
  // share 2 cores with their comm threads here, and a tiny model's backward ends before they run.
  train::TrainArgs args = train::parse_train_args({"--model",
                                                   "small-gpt2",
                                                   "--mock-data",
                                                   "--seq-length",
                                                   "128",
                                                   "--micro-batch-size",
                                                   "2",
                                                   "--global-batch-size",
                                                   std::to_string(2 * world.size()),
                                                   "--train-iters",
                                                   "3",
                                                   "--eval-interval",
                                                   "0",
                                                   "--overlap-grad-reduce",
                                                   "--ddp-bucket-size",
                                                   "1000000",
                                                   "--data-parallel-sharding-strategy",
                                                   "optim_grads_params",
                                                   "--overlap-param-gather",
                                                   "--profile",
                                                   dir,
                                                   "--profile-steps",
                                                   "2:3"});
  std::FILE* quiet = std::fopen("/dev/null", "w");
  train::run_training(args, quiet, world);
  std::fclose(quiet);
  if (world.rank() != 0) return;  // rank 0 profiles
  std::ifstream in(dir + "/summary.json");
  ASSERT_TRUE(in.good()) << dir;
  const nlohmann::json summary = nlohmann::json::parse(in);
  for (const char* lane : {"comm", "gather"}) {  // the reduction's and ZeRO-3's prefetches
    nlohmann::json found;
    for (const nlohmann::json& stream : summary.value("streams", nlohmann::json::array()))
      if (stream.value("stream", "") == lane) found = stream;
    ASSERT_TRUE(found.is_object()) << lane << " " << summary.dump(2);
    EXPECT_GT(found.value("tasks", 0), 0) << lane;
    EXPECT_GT(found.value("overlap_ms", 0.0), 0.0) << lane << " " << found.dump();
  }
}

TEST(OverlapGradReduce, BucketSizeWithoutOverlapIsExplained) {
  const std::string msg = testing::error_of([] { args_for(2, 2, "", "tiny-gpt2", {"--ddp-bucket-size", "1000"}); });
  EXPECT_NE(msg.find("--ddp-bucket-size sizes the buckets of --overlap-grad-reduce and the distributed optimizer's"),
            std::string::npos)
      << msg;
}

// ZeRO-3 sums gradients as ZeRO-2 does, and gathers parameters bit for bit: one process's result.
TEST(ZeRO3, IsBitwiseOneProcess) {
  compare("tiny-gpt2", 2, 0.0, kZero3, 1e-12);
  compare("tiny-qwen3", 1, 0.0, kZero3);  // tied embeddings
  compare("tiny-qwen3-moe", 2, 0.0, kZero3, 1e-12);
}

// A replayed layer gathers its parameters again; offload and overlapped reduction compose.
TEST(ZeRO3, ComposesWithEveryMemoryFeature) {
  compare("tiny-llama", 1, 0.0,
          with(kZero3,
               {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "2"}));
  compare("tiny-llama", 2, 0.0, with(kZero3, {"--recompute-activation-function", "--recompute-norm"}), 1e-12);
  compare("tiny-gpt2", 1, 0.0,
          with(kZero3, {"--activation-offload", "--overlap-grad-reduce", "--ddp-bucket-size", "20000"}));
  // The next layer's parameters gathered on the "gather" stream: the same bits.
  compare("tiny-llama", 2, 0.0, with(kZero3, {"--overlap-param-gather"}), 1e-12);
  compare("tiny-llama", 1, 0.0,
          with(kZero3, {"--overlap-param-gather", "--overlap-grad-reduce", "--recompute-granularity", "full",
                        "--recompute-method", "block", "--recompute-num-layers", "1"}));
  // Chunked loss (in both runs: it sums in another order than the plain loss): the LM head, outside
  // the layers, computed chunk by chunk.
  compare("tiny-gpt2", 1, 0.0, kZero3, -1, {"--loss-compute-mode", "chunk", "--loss-chunk-size", "8"});
  // The swap optimizer swaps the shard's states only.
  compare("tiny-gpt2", 1, 0.0, with(kZero3, {"--swap-optimizer", "--swap-optimizer-times", "4"}));
}

// ZeRO-3 checkpoints: the whole model gathered for rank 0 to write, every rank's optimizer shard;
// a ZeRO-3 run resumes bit for bit, and one process (without sharding) resumes from it too.
TEST(ZeRO3, CheckpointsResumeBitwise) {
  dist::Communicator& world = dist::world();
  auto args = [&](const std::string& save, int64_t iters, const std::string& load, bool sharded) {
    std::vector<std::string> extra = {"--lr-decay-iters", "4"};
    if (!load.empty()) extra.insert(extra.end(), {"--load", load});
    if (sharded) extra.insert(extra.end(), kZero3.begin(), kZero3.end());
    return args_for(2, 2 * world.size(), save, "tiny-llama", extra, iters);
  };
  const ResumedRuns runs = resume_runs(world, scratch_dir("zero3_resume", world.size()), args);
  for (const auto& [name, t] : runs.full) {
    EXPECT_EQ(max_abs_difference(runs.resumed.at(name), t), 0.0) << "resumed " << name;
    EXPECT_EQ(max_abs_difference(runs.one.at(name), t), 0.0) << "one process " << name;
  }
}

// Sharded, the NaN guard names the first non-finite piece over every rank's shard (the whole
// gradients are gone by then), whichever rank holds it.
TEST(ShardedNanGuard, NamesTheFirstNonFinitePieceOfAnyRank) {
  dist::Communicator& world = dist::world();
  const int last = world.size() - 1;
  Tensor piece = ones({4});
  Tensor g = ones({4});
  if (world.rank() == last) g.data<float>()[2] = std::numeric_limits<float>::quiet_NaN();
  piece.set_grad(g);
  const optim::NamedParameters mine = {
      {"w[" + std::to_string(4 * world.rank()) + ":" + std::to_string(4 * world.rank() + 4) + "]", piece}};
  const std::string want = "w[" + std::to_string(4 * last) + ":" + std::to_string(4 * last + 4) + "]" +
                           (world.size() > 1 ? " (rank " + std::to_string(last) + "'s shard)" : "");
  EXPECT_EQ(train::nonfinite_step(1.0, std::nan(""), mine, &world),
            "the gradient norm is nan (first non-finite gradient: " + want + ")");
}

// --bf16 under sharding: f32 gradient sums reduce-scattered into an f32 shard, f32 master weights of
// the shard's pieces, bf16 parameters gathered — bit for bit one bf16 process (ZeRO-2/3 for any
// accumulation, as in f32).
TEST(ShardedBf16, EveryStrategyIsBitwiseOneBf16Process) {
  const std::vector<std::string> bf16 = {"--bf16"};
  compare("tiny-llama", 1, 0.0, {"--use-distributed-optimizer"}, -1, bf16);
  compare("tiny-gpt2", 2, 0.0, {"--data-parallel-sharding-strategy", "optim_grads"}, 1e-12, bf16);
  compare("tiny-qwen3-moe", 2, 0.0, {"--data-parallel-sharding-strategy", "optim_grads_params"}, 1e-12, bf16);
}

// --bf16 with --overlap-grad-reduce: each f32 sum becomes its parameter's gradient as soon as the
// backward's bf16 gradient is added into it (train/main_grads.h), before the bucket's reduction
// reads it; the sums reduced are the same, so is every bit.
TEST(OverlapGradReduce, Bf16IsBitwiseOneBf16Process) {
  const std::vector<std::string> bf16 = {"--bf16"};
  compare("tiny-gpt2", 1, 0.0, kOverlap, -1, bf16);
  // Experts some rank's tokens did not choose: f32 zeros there before their bucket starts.
  compare("tiny-qwen3-moe", 1, 0.0, kOverlap, -1, bf16);
  compare("tiny-llama", 1, 0.0, with(kOverlap, {"--use-distributed-optimizer"}), -1, bf16);
  compare("tiny-qwen3-moe", 2, 0.0, with(kOverlap, kZero2), 1e-12, bf16);
  compare("tiny-llama", 2, 0.0, with(with(kOverlap, kZero3), {"--overlap-param-gather"}), 1e-12, bf16);
}

}  // namespace
}  // namespace tidal::train
