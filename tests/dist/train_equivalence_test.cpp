// Data-parallel training on this run's ranks against one process accumulating the same micro-batches
// (docs/distributed.md): the global batch is the same, so with one micro-batch per rank the losses and
// the trained weights are bit for bit those of one process; with several micro-batches per rank only
// the order of fp32 additions differs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <tuple>

#include "tests/dist/train_runs.h"
#include "tidal/allocator.h"
#include "tidal/dist/collectives.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/causal_lm.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"
#include "tidal/plan/oom_advice.h"
#include "tidal/train/trainer.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

TEST(DataParallel, OneMicroBatchPerRankIsBitwiseOneProcess) { compare("tiny-gpt2", 1, 0.0); }

TEST(DataParallel, OneMicroBatchPerRankIsBitwiseOneProcessForMoE) { compare("tiny-qwen3-moe", 1, 0.0); }

// Two micro-batches per rank: rank r adds its own two first, one process adds them in global order;
// fp32 rounding of a few additions, then 4 AdamW steps of lr 2e-3 (updates of ~lr each).
TEST(DataParallel, SeveralMicroBatchesPerRankAgreeToSummationOrder) { compare("tiny-gpt2", 2, 1e-5); }

// Multi-token prediction (--mtp-num-layers): the depths' losses average over the ranks' micro-batches as the main
// loss does; under ZeRO-3 the depths' parameters are gathered for the step like the embedding's.
TEST(DataParallel, MultiTokenPredictionAgreesWithOneProcess) {
  const std::vector<std::string> mtp = {"--mtp-num-layers", "2"};
  compare("tiny-deepseek-v3", 1, 0.0, {}, -1, mtp);
  compare("tiny-deepseek-v3", 2, 1e-5, {"--data-parallel-sharding-strategy", "optim_grads_params"}, -1, mtp);
}

// --bf16 (train/main_grads.h): each rank's f32 gradient sums are all-reduced as an f32 run's are, in
// rank order; with one micro-batch per rank that is one process's order of f32 additions, so the bf16
// weights are bit for bit one process's. In the MoE model an expert none of a rank's tokens chose
// gets f32 zeros on that rank for the reduction.
TEST(DataParallel, Bf16OneMicroBatchPerRankIsBitwiseOneProcess) {
  compare("tiny-gpt2", 1, 0.0, {}, -1, {"--bf16"});
  compare("tiny-qwen3-moe", 1, 0.0, {}, -1, {"--bf16"});
}

// The distributed optimizer: reduce-scatter, the norm from the shards' chunk sums, the shard's
// update, all-gather — still bit for bit one process, and its checkpoint is one process's too.
TEST(DistributedOptimizer, OneMicroBatchPerRankIsBitwiseOneProcess) {
  compare("tiny-llama", 1, 0.0, {"--use-distributed-optimizer"});
  compare("tiny-qwen3-moe", 1, 0.0, {"--data-parallel-sharding-strategy", "optim"});
}

TEST(DistributedOptimizer, SeveralMicroBatchesPerRankAgreeToSummationOrder) {
  compare("tiny-gpt2", 2, 1e-5, {"--use-distributed-optimizer"});
}

// Per rank: the whole parameters and the whole gradients, AdamW's two f32 moments only for the rank's
// shard (docs/distributed.md). A step that reduces each gradient once (ZeRO-1, and ZeRO-2/3 with one
// micro-batch per rank) sums the shard in place, in the whole gradients (Note [Reduce-scatter in place]):
// the gradients peak at no_shard's 4P. ZeRO-2 with two micro-batches: between them only the shard's sums
// stay; reduced after backward ("+onebucket": --ddp-bucket-size larger than the model) the next backward's whole
// gradients come on top of them (4P + 4S_r); by default they are reduced bucket by bucket during backward (Note
// [Synchronous buckets], parallel/grad_sync.cpp) and never reach ZeRO-1's 4P beside them. ZeRO-3 likewise, but for
// the parameters: this rank's shard, and the whole ones of the layer computing (and of the next, with
// --overlap-param-gather).
//
// --bf16: the parameters (whole or shard) are bf16, 2 bytes per element; the gradients are the f32
// sums (a backward's bf16 gradient is added into its sum as soon as it is complete); the shard's AdamW keeps f32
// master weights beside its two moments: 12 bytes per shard element (Megatron's 18 bytes per parameter, sharded).
TEST(DistributedOptimizer, PerRankMemoryIsExactlyTheFormula) {
  dist::Communicator& world = dist::world();
  // "x1": one micro-batch per rank (ZeRO-1 always reduces once, after its last).
  for (const std::string run :
       {"optim", "optim_grads", "optim_grads_params", "optim_grads_params+prefetch", "optim_grads+x1",
        "optim_grads_params+x1", "optim+bf16", "optim_grads+bf16", "optim_grads_params+prefetch+bf16",
        "optim_grads+x1+bf16", "optim_grads_params+x1+bf16", "optim_grads+onebucket",
        "optim_grads_params+prefetch+onebucket", "optim_grads+onebucket+bf16"}) {
    const std::string strategy = run.substr(0, run.find('+'));
    const int64_t micro_per_rank = strategy == "optim" || run.find("+x1") != std::string::npos ? 1 : 2;
    const bool prefetch = run.find("+prefetch") != std::string::npos;
    const bool bf16 = run.ends_with("+bf16");
    std::vector<std::string> flags = {"--data-parallel-sharding-strategy", strategy};
    if (prefetch) flags.push_back("--overlap-param-gather");
    if (bf16) flags.push_back("--bf16");
    const bool one_bucket = run.find("+onebucket") != std::string::npos;
    if (one_bucket) flags.insert(flags.end(), {"--ddp-bucket-size", "1000000000"});
    const int64_t param_bytes = bf16 ? 2 : 4, state_bytes = bf16 ? 12 : 8;
    const TrainArgs args = args_for(1, micro_per_rank * world.size(), "", "tiny-gpt2", flags);
    std::FILE* quiet = std::fopen("/dev/null", "w");
    run_training(args, quiet, world);
    std::fclose(quiet);
    const MemoryStats st = device_allocator(Device::cpu()).stats();
    auto model = models::create_model(args.model);
    std::vector<int64_t> numels;
    for (const auto& [name, p] : model->named_parameters()) numels.push_back(p.numel());
    const optim::ShardLayout layout = optim::make_shard_layout(numels, world.size(), optim::kGradNormChunk);
    if (!strategy.starts_with("optim_grads_params")) {
      EXPECT_EQ(st[MemoryCategory::parameter].peak, param_bytes * layout.total()) << run;
    } else {
      EXPECT_EQ(st[MemoryCategory::parameter].peak,
                param_bytes * zero3_parameter_peak(args, world.size(), world.rank(), prefetch))
          << run;
    }
    // bf16: at the end of a backward, every other f32 sum (and with accumulation the shard's sums) is there
    // when backward's last gradient, the position embedding's (wpe), is added in bf16.
    const int64_t last_bf16 = bf16 ? 2 * args.model.max_position_embeddings * args.model.hidden_size : 0;
    const int64_t shard_sums = micro_per_rank > 1 ? 4 * layout.shard_size(world.rank()) : 0;  // else in place
    if (shard_sums == 0 || one_bucket || world.size() == 1) {  // one rank reduces after backward
      EXPECT_EQ(st[MemoryCategory::gradient].peak, 4 * layout.total() + shard_sums + last_bf16) << run;
    } else {  // synchronous buckets: the shard's sums and less than a micro-batch's whole gradients beside them
      EXPECT_GT(st[MemoryCategory::gradient].peak, shard_sums) << run;
      EXPECT_LE(st[MemoryCategory::gradient].peak, 4 * layout.total() + last_bf16) << run;  // ZeRO-1's at most
    }
    EXPECT_EQ(st[MemoryCategory::optimizer_state].peak, state_bytes * layout.shard_size(world.rank())) << run;
  }
}

// Resume on the same number of ranks, on another, and from one process: each continues bit for bit.
TEST(DistributedOptimizer, CheckpointsResumeOnAnyNumberOfRanks) {
  dist::Communicator& world = dist::world();
  const int ranks = world.size();
  const std::string dir = scratch_dir("resume", ranks);
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  auto args = [&](const std::string& save, int64_t iters, const std::string& load, bool sharded) {
    std::vector<std::string> extra = {"--lr-decay-iters", "4"};  // the same schedule when stopping at 2
    if (!load.empty()) extra.insert(extra.end(), {"--load", load});
    if (sharded) extra.push_back("--use-distributed-optimizer");
    return args_for(2, 2 * ranks, save, "tiny-gpt2", extra, iters);
  };
  std::FILE* quiet = std::fopen("/dev/null", "w");
  dist::SingleCommunicator single;
  const std::string own = dir + "/one" + std::to_string(world.rank());
  // One process: uninterrupted, and 2 steps saved.
  run_training(args(own + "/full", 4, "", false), quiet, single);
  run_training(args(own + "/half", 2, "", false), quiet, single);
  // The ranks, sharded: 2 steps saved (each rank its shard file, tests/dist/checkpoint_test.cpp).
  run_training(args(dir + "/half", 2, "", true), quiet, world);
  world.barrier();
  // Resumed by the ranks from their own save (each reads its own file) and from one process's (each
  // takes its pieces of it); by one process from the ranks' (it assembles the whole state).
  run_training(args(dir + "/ranks", 4, dir + "/half", true), quiet, world);
  run_training(args(dir + "/from_one", 4, own + "/half", true), quiet, world);
  run_training(args(own + "/from_ranks", 4, dir + "/half", false), quiet, single);
  world.barrier();
  std::fclose(quiet);
  const auto full = io::load_safetensors(own + "/full/iter_0000004/model.safetensors").tensors;
  for (const std::string& run : {dir + "/ranks", dir + "/from_one", own + "/from_ranks"}) {
    const auto w = io::load_safetensors(run + "/iter_0000004/model.safetensors").tensors;
    for (const auto& [name, t] : full) EXPECT_EQ(max_abs_difference(w.at(name), t), 0.0) << run << " " << name;
  }
}

TEST(DataParallel, AGlobalBatchThatDoesNotDivideIsExplained) {
  dist::Communicator& world = dist::world();
  if (world.size() == 1) GTEST_SKIP() << "needs several ranks";
  try {
    run_training(args_for(2, 2 * world.size() + 2, scratch_dir("bad", world.size())), stdout, world);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a multiple of --micro-batch-size 2 x " + std::to_string(world.size()) +
                                         " data-parallel ranks"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tidal::train

namespace tidal::train {
namespace {

// The OOM advice's and tidal plan's prediction of a sharded step's peak (largest shard) against the
// largest peak any rank measured, as tests/unit/profile_test.cpp does for one process.
TEST(DistributedOptimizer, PredictedPeakMatchesTheLargestRank) {
  dist::Communicator& world = dist::world();
  // (model, micro-batches per rank, strategy and flags): with accumulation the gradients kept between
  // micro-batches (whole, or the shard's sums under ZeRO-2/3) count too.
  const std::tuple<const char*, int, std::vector<std::string>> runs[] = {
      {"tiny-gpt2", 1, {"optim"}},
      {"tiny-llama", 1, {"optim_grads"}},
      {"tiny-llama", 1, {"optim_grads_params"}},
      {"tiny-llama", 1, {"optim_grads_params", "--overlap-param-gather"}},
      {"tiny-gpt2", 2, {"no_shard"}},
      {"tiny-llama", 2, {"optim_grads"}},
      {"tiny-gpt2", 2, {"optim_grads_params"}},  // tied embeddings, buckets reduced during backward
      // --bf16: 2-byte parameters, f32 gradient sums, 12 B per shard element of AdamW state.
      {"tiny-gpt2", 1, {"optim", "--bf16"}},
      {"tiny-llama", 2, {"optim_grads", "--bf16"}},
      {"tiny-llama", 1, {"optim_grads_params", "--bf16"}}};
  for (const auto& [model, accumulation, flags] : runs) {
    std::vector<std::string> argv = {"--model",
                                     model,
                                     "--mock-data",
                                     "--seq-length",
                                     "64",
                                     "--micro-batch-size",
                                     "4",
                                     "--global-batch-size",
                                     std::to_string(4 * accumulation * world.size()),
                                     "--train-iters",
                                     "2",
                                     "--no-progress",
                                     "--eval-interval",
                                     "0",
                                     "--data-parallel-sharding-strategy"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const TrainArgs args = parse_train_args(argv);
    const std::string strategy =
        (flags.size() > 1 ? flags[0] + " " + flags[1] : flags[0]) + " x" + std::to_string(accumulation);
    std::FILE* quiet = std::fopen("/dev/null", "w");
    run_training(args, quiet, world);
    std::fclose(quiet);
    const double measured = dist::all_reduce_max(world, double(device_allocator(Device::cpu()).stats().peak_allocated));
    const double predicted =
        double(plan::predict_step_peak(args.model, plan::triage_settings(args.on(world.size()))).total);
    EXPECT_NEAR(predicted / measured, 1.0, 0.01)
        << model << " " << strategy << ": predicted " << predicted << ", measured " << measured;
  }
}

}  // namespace
}  // namespace tidal::train
