// Context-parallel training (--context-parallel-size C, docs/distributed.md) against one process on
// the same global batch: each CP group trains on its data-parallel rank's samples, every rank on its
// two chunks of each sequence, and the gradients are summed over all ranks, so the losses and the
// trained weights are one process's up to the order of fp32 additions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/dist/train_runs.h"
#include "tidal/allocator.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/models/causal_lm.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"
#include "tidal/plan/dry_run.h"
#include "tidal/train/builtin_corpus.h"
#include "tidal/train/trainer.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

// fp32: the ring's merged softmax and the sums over ranks round differently from one process's
// kernels. Measured on the tiny models at C = 2, 3, 4 (AdamW epsilon 1, below): losses within 2.4e-7
// (of ~6.2), weights after 4 steps within 7.5e-9. A wrong position moves the losses by ~1e-4; a
// block's dK left out moves weights by ~8e-5. (With epsilon 1e-8 the weights differ by up to 1.2e-4:
// Adam's normalization amplifies rounding where a gradient sums to nearly 0.)
constexpr double kLossTolerance = 2e-6, kWeightTolerance = 1e-7;

struct Peaks {
  int64_t activation = 0, logits = 0, parameter = 0, gradient = 0, optimizer_state = 0;
};

// C ranks per CP group over this run's ranks, one micro-batch of 2 per data-parallel rank, against
// one process on the same global batch; flags `both` go to both runs. Returns (CP run, one process)
// activation and logits peaks of this rank.
// `cp_only` go to the CP run alone (a sharding strategy: one process has nothing to shard over).
std::pair<Peaks, Peaks> compare_cp(const std::string& model, int cp, std::vector<std::string> both = {},
                                   int64_t seq = 16, double weight_tolerance = kWeightTolerance,
                                   double loss_tolerance = kLossTolerance,
                                   const std::vector<std::string>& cp_only = {}) {
  dist::Communicator& world = dist::world();
  const int ranks = world.size();
  const int64_t micro = 2, global = micro * (ranks / cp);
  std::string tag = "cp" + std::to_string(cp) + "_" + model;
  for (const std::string& e : both) tag += e;
  for (const std::string& e : cp_only) tag += e;
  const std::string dir = scratch_dir(tag, ranks);
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  Allocator& alloc = device_allocator(Device::cpu());
  const auto peaks = [&] {
    const MemoryStats st = alloc.stats();
    return Peaks{st[MemoryCategory::activation].peak, st[MemoryCategory::logits].peak,
                 st[MemoryCategory::parameter].peak, st[MemoryCategory::gradient].peak,
                 st[MemoryCategory::optimizer_state].peak};
  };
  std::vector<std::string> flags = both;
  flags.insert(flags.end(), cp_only.begin(), cp_only.end());
  flags.insert(flags.end(), {"--context-parallel-size", std::to_string(cp)});
  // AdamW with epsilon 1 updates by about lr x the gradient: the weights show the gradients'
  // rounding, not Adam's normalization of it where a gradient is near 0 (which amplifies it to ~lr).
  flags.insert(flags.end(), {"--adam-eps", "1"});
  both.insert(both.end(), {"--adam-eps", "1"});
  const Run run = train_on(world, world, args_for(micro, global, dir + "/ranks", model, flags, 4, seq));
  const Peaks cp_peaks = peaks();
  dist::SingleCommunicator single;  // one process (on every rank, alone)
  const Run one = train_on(
      single, world, args_for(micro, global, dir + "/one_rank" + std::to_string(world.rank()), model, both, 4, seq));
  const Peaks one_peaks = peaks();
  if (std::getenv("TIDAL_CP_MEASURE")) {  // prints the differences the tolerances below were set from
    double w = 0, l = 0;
    for (size_t i = 0; i < one.result.losses.size(); ++i)
      l = std::max(l, std::abs(run.result.losses[i] - one.result.losses[i]));
    for (const auto& [name, t] : one.weights) w = std::max(w, max_abs_difference(run.weights.at(name), t));
    std::printf("MEASURE %s rank %d: losses %.3g weights %.3g\n", tag.c_str(), world.rank(), l, w);
  }
  expect_same(run, one, weight_tolerance, loss_tolerance);
  return {cp_peaks, one_peaks};
}

TEST(ContextParallel, TwoRanksTrainLikeOneProcess) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  for (const std::string model : {"tiny-llama", "tiny-qwen3", "tiny-gpt2"}) {
    // Every activation is 1/C of the sequence: the logits exactly half; the activations' peak
    // within a few bytes of half (measured 8 bytes below: scalars and the peak's moment differ).
    const auto [cp, one] = compare_cp(model, 2);
    EXPECT_EQ(cp.logits * 2, one.logits) << model;
    EXPECT_NEAR(double(cp.activation), double(one.activation) / 2, 64.0) << model;
  }
}

// LoRA (docs/finetuning.md): the adapters of C ranks are one process's; the frozen base has no gradient to reduce.
TEST(ContextParallel, LoraOnTwoRanks) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  compare_cp("tiny-llama", 2, {"--lora-target-modules", "all-linear", "--lora-r", "4"});
}

// Mixture of experts: the tokens of a rank's chunks are routed as on one process; the load-balancing
// loss takes the sample's expert counts (summed over the CP group), so it is one process's too
// (with each rank's own counts the losses move by 4.3e-5, beyond kLossTolerance).
// (With expert parallelism: tests/dist/expert_parallel_test.cpp.)
TEST(ContextParallel, MixtureOfExpertsOnTwoRanks) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  const auto [cp, one] = compare_cp("tiny-qwen3-moe", 2);
  EXPECT_EQ(cp.logits * 2, one.logits);
  compare_cp("tiny-qwen3-moe", 2, {"--recompute-granularity", "selective", "--recompute-modules", "moe"});
  compare_cp("tiny-qwen3-moe", 2, {"--activation-offload"});
}

// Mistral's sliding window (8 keys of a 16-token sequence: a rank's chunk of 8 reaches back into the
// other rank's) through ring attention (flash) and the all-gathered K/V (eager); Qwen2's q/k/v biases.
TEST(ContextParallel, SlidingWindowAndBiasesOnTwoRanks) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  compare_cp("tiny-mistral", 2);
  compare_cp("tiny-mistral", 2, {"--attention", "eager"});
  compare_cp("tiny-mistral", 2, {"--recompute-granularity", "selective", "--activation-offload"});
  compare_cp("tiny-qwen2", 2);
  compare_cp("tiny-gemma3", 2);  // sliding and full layers, two RoPE tables, four norms a layer
  compare_cp("tiny-gemma3", 2, {"--attention", "eager"});
  // DeepSeek-V3: MLA (values narrower than queries and keys, one rotary key shared by the heads) through
  // ring attention and the all-gathered K/V; its MoE with the correction bias and a shared expert.
  compare_cp("tiny-deepseek-v3", 2);
  compare_cp("tiny-deepseek-v3", 2, {"--attention", "eager"});
  compare_cp("tiny-deepseek-v3", 2, {"--recompute-modules", "mla_up_proj,moe", "--activation-offload"});
  // Multi-token prediction: each rank rolls its chunks' ids and targets from the whole sequence and weighs
  // each depth's local mean by its share of the depth's targets.
  compare_cp("tiny-deepseek-v3", 2, {"--mtp-num-layers", "2"});
}

// Packed documents (--reset-position-ids --reset-attention-mask) on the built-in corpus, whose fortunes
// end in EOD: each rank's rows carry their global document starts and positions, through ring
// attention (flash) and the all-gathered K/V (eager), with RoPE and with GPT-2's learned positions.
TEST(ContextParallel, PackedDocumentsOnTwoRanks) {
  dist::Communicator& world = dist::world();
  if (world.size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  const std::string dir = scratch_dir("cp_packed_corpus", world.size());
  PreparedCorpus corpus;
  if (world.rank() == 0) corpus = prepare_builtin_corpus(512, dir);
  world.barrier();
  if (world.rank() != 0) corpus = prepare_builtin_corpus(512, dir);  // found in the cache now
  const std::vector<std::string> packed = {"--data-path",         corpus.data_prefix,     "--tokenizer",
                                           corpus.tokenizer_path, "--reset-position-ids", "--reset-attention-mask"};
  std::vector<std::string> eager = packed;
  eager.insert(eager.end(), {"--attention", "eager"});
  compare_cp("tiny-llama", 2, packed, 64);
  compare_cp("tiny-llama", 2, eager, 64);
  compare_cp("tiny-gpt2", 2, packed, 64);
  compare_cp("tiny-mistral", 2, packed, 64);
  std::vector<std::string> masked = packed;
  masked.push_back("--eod-mask-loss");
  compare_cp("tiny-llama", 2, masked, 64);
  // The samples hold several documents: the layout changes the losses.
  dist::SingleCommunicator single;
  const std::vector<std::string> plain(packed.begin(), packed.begin() + 4);
  const train::Run with = train_on(
      single, world, args_for(2, 2, dir + "/with" + std::to_string(world.rank()), "tiny-llama", packed, 4, 64));
  const train::Run without = train_on(
      single, world, args_for(2, 2, dir + "/without" + std::to_string(world.rank()), "tiny-llama", plain, 4, 64));
  EXPECT_GT(std::abs(with.result.losses[0] - without.result.losses[0]), 1e-4);
}

TEST(ContextParallel, TwoRanksWithRecomputeAndOffload) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  compare_cp("tiny-llama", 2,
             {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"});
  compare_cp("tiny-gpt2", 2, {"--recompute-granularity", "selective"});
  compare_cp("tiny-qwen3", 2, {"--activation-offload"});
}

// --bf16 on both sides: bf16 parameters and activations, f32 gradient sums and AdamW master weights.
// The ring's per-block bf16 outputs, merged in f32 and rounded once more, are not one process's
// whole-sequence kernel: measured at C = 2 (tiny-llama, tiny-gpt2) losses within 2.6e-4 (of ~6.2) and
// weights within 1.2e-4, one bf16 rounding of a weight near 0.02 (the init's scale). Tolerances:
// about four times the losses' and two such roundings.
constexpr double kBf16LossTolerance = 1e-3, kBf16WeightTolerance = 2.5e-4;

TEST(ContextParallel, TwoRanksInBf16TrainLikeOneProcessInBf16) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  for (const std::string model : {"tiny-llama", "tiny-gpt2"})
    compare_cp(model, 2, {"--bf16"}, 16, kBf16WeightTolerance, kBf16LossTolerance);
  compare_cp("tiny-qwen3", 2, {"--bf16"}, 16, kBf16WeightTolerance, kBf16LossTolerance,
             {"--data-parallel-sharding-strategy", "optim_grads", "--overlap-grad-reduce"});
}

// The distributed optimizer under CP shards over all N = DP x C ranks (every rank holds the whole
// parameters and the gradients are summed over all of them), as Megatron's does: per rank the
// docs/distributed.md "Memory per rank" peaks with N the world's ranks (one micro-batch per data-parallel
// rank: every strategy sums the shard in place, in the whole gradients).
void expect_sharded_peaks(const Peaks& p, const std::string& model, const std::string& strategy) {
  dist::Communicator& world = dist::world();
  std::vector<int64_t> numels;
  for (const auto& [name, t] : models::create_model(args_for(1, 1, "", model).model)->named_parameters())
    numels.push_back(t.numel());
  const optim::ShardLayout layout = optim::make_shard_layout(numels, world.size(), optim::kGradNormChunk);
  const int64_t shard = layout.shard_size(world.rank());
  EXPECT_EQ(p.optimizer_state, 8 * shard) << strategy;
  EXPECT_EQ(p.gradient, 4 * layout.total()) << strategy;
  // (ZeRO-3's parameters: these runs save, which gathers the whole model; ZeRO3ParametersPerRank… below.)
  if (strategy != "optim_grads_params") {
    EXPECT_EQ(p.parameter, 4 * layout.total()) << strategy;
  }
}

std::vector<std::string> sharding(const std::string& strategy) {
  return {"--data-parallel-sharding-strategy", strategy};
}

TEST(ContextParallel, TwoRanksShardedTrainLikeOneProcess) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  for (const std::string strategy : {"optim", "optim_grads", "optim_grads_params"}) {
    const Peaks cp = compare_cp("tiny-llama", 2, {}, 16, kWeightTolerance, kLossTolerance, sharding(strategy)).first;
    expect_sharded_peaks(cp, "tiny-llama", strategy);
  }
}

// ZeRO-3's parameters under CP (a run that does not save: saving gathers the whole model).
TEST(ContextParallel, ZeRO3ParametersPerRankAreTheFormula) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  dist::Communicator& world = dist::world();
  for (const bool prefetch : {false, true}) {
    std::vector<std::string> flags = {"--context-parallel-size", "2", "--data-parallel-sharding-strategy",
                                      "optim_grads_params"};
    if (prefetch) flags.push_back("--overlap-param-gather");
    const TrainArgs args = args_for(2, 2, "", "tiny-llama", flags);
    std::FILE* quiet = std::fopen("/dev/null", "w");
    run_training(args, quiet, world);
    std::fclose(quiet);
    EXPECT_EQ(device_allocator(Device::cpu()).stats()[MemoryCategory::parameter].peak,
              4 * zero3_parameter_peak(args, world.size(), world.rank(), prefetch))
        << prefetch;
  }
}

TEST(ContextParallel, TwoRanksOverlapGradReduceTrainLikeOneProcess) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  compare_cp("tiny-gpt2", 2, {}, 16, kWeightTolerance, kLossTolerance, {"--overlap-grad-reduce"});
  std::vector<std::string> zero2 = sharding("optim_grads");
  zero2.push_back("--overlap-grad-reduce");
  compare_cp("tiny-llama", 2, {}, 16, kWeightTolerance, kLossTolerance, zero2);
  // ZeRO-3 with the next layer's gather run ahead (--overlap-param-gather).
  std::vector<std::string> zero3 = sharding("optim_grads_params");
  zero3.insert(zero3.end(), {"--overlap-grad-reduce", "--overlap-param-gather"});
  compare_cp("tiny-qwen3", 2, {}, 16, kWeightTolerance, kLossTolerance, zero3);
}

// ZeRO-2/3 with accumulation under CP reduce bucket by bucket during backward, on the compute thread (Note
// [Synchronous buckets], parallel/grad_sync.cpp), between the ring's exchanges and ZeRO-3's gathers of
// backward, in the same order on every rank: bit for bit the run that reduces after backward (one bucket).
TEST(ContextParallel, SynchronousBucketsAreTheReductionAfterBackward) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  dist::Communicator& world = dist::world();
  for (const std::string strategy : {"optim_grads", "optim_grads_params"}) {
    const std::string dir = scratch_dir("cp_buckets_" + strategy, world.size());
    if (world.rank() == 0) fs::remove_all(dir);
    world.barrier();
    std::vector<std::string> flags = sharding(strategy);
    flags.insert(flags.end(), {"--context-parallel-size", "2", "--recompute-granularity", "full", "--recompute-method",
                               "uniform", "--recompute-num-layers", "1"});
    std::vector<std::string> buckets = flags, one = flags;
    buckets.insert(buckets.end(), {"--ddp-bucket-size", "20000"});
    one.insert(one.end(), {"--ddp-bucket-size", "1000000000"});
    // Two micro-batches of 2 on the one data-parallel rank.
    const train::Run bucketed = train_on(world, world, args_for(2, 4, dir + "/buckets", "tiny-qwen3", buckets));
    const train::Run after = train_on(world, world, args_for(2, 4, dir + "/one", "tiny-qwen3", one));
    expect_same(bucketed, after, 0.0, 0.0);
  }
}

// A sharded CP run's checkpoint (each rank its shard of N = DP x C): resumed by the same ranks it
// continues bit for bit; one process resumes from it too (it assembles the whole state).
TEST(ContextParallel, ShardedCheckpointsResume) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  auto args = [&](const std::string& save, int64_t iters, const std::string& load, bool cp) {
    std::vector<std::string> extra = {"--lr-decay-iters", "4", "--adam-eps", "1"};  // one schedule at 2 and 4
    if (!load.empty()) extra.insert(extra.end(), {"--load", load});
    if (cp)
      extra.insert(extra.end(), {"--context-parallel-size", "2", "--data-parallel-sharding-strategy", "optim_grads"});
    return args_for(2, 2, save, "tiny-llama", extra, iters);
  };
  const ResumedRuns runs = resume_runs(dist::world(), scratch_dir("cp_resume", 2), args);
  for (const auto& [name, t] : runs.full) {
    EXPECT_EQ(max_abs_difference(runs.resumed.at(name), t), 0.0) << name;
    EXPECT_LE(max_abs_difference(runs.one.at(name), t), kWeightTolerance) << name;
  }
}

TEST(ContextParallel, ShardedDataTimesContextParallelOnFourRanks) {
  if (dist::world().size() != 4) GTEST_SKIP() << "runs on four ranks (ctest dist4)";
  const Peaks cp = compare_cp("tiny-llama", 2, {}, 16, kWeightTolerance, kLossTolerance, sharding("optim_grads")).first;
  expect_sharded_peaks(cp, "tiny-llama", "optim_grads");  // DP 2 x CP 2: shards of N = 4
}

// Dropout: every rank reserves the whole tensor's range where
// one process does, and draws its rows' part of it (hidden dropout at its global rows, ring attention
// per block of the whole matrix), so the masks are one process's. Measured at C = 2, 3: losses within
// 3.2e-7, weights within 3.7e-9; a mask placed wrongly moves the losses by 4e-3 to 1.4e-2. Data parallel only on 1 rank
// per CP group: DP ranks draw one stream each.
const std::vector<std::string> kDropout = {"--hidden-dropout", "0.1", "--attention-dropout", "0.1"};

TEST(ContextParallel, TwoRanksWithDropoutTrainLikeOneProcess) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  compare_cp("tiny-gpt2", 2, kDropout);
  compare_cp("tiny-llama", 2, kDropout);
  // A full recompute restores the RNG state: its forward draws the same masks again.
  std::vector<std::string> recompute = kDropout;
  recompute.insert(recompute.end(),
                   {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"});
  compare_cp("tiny-gpt2", 2, recompute);
}

TEST(ContextParallel, ThreeRanksWithDropoutTrainLikeOneProcess) {
  if (dist::world().size() != 3) GTEST_SKIP() << "runs on three ranks (ctest dist3)";
  compare_cp("tiny-gpt2", 3, kDropout, 24);
}

// C = 3: sequences of 24 in six chunks of 4; rank 1 holds positions 4-7 and 16-19.
TEST(ContextParallel, ThreeRanksTrainLikeOneProcess) {
  if (dist::world().size() != 3) GTEST_SKIP() << "runs on three ranks (ctest dist3)";
  compare_cp("tiny-qwen3", 3, {}, 24);
  compare_cp("tiny-gpt2", 3, {}, 24);
}

TEST(ContextParallel, DataTimesContextParallelOnFourRanks) {
  if (dist::world().size() != 4) GTEST_SKIP() << "runs on four ranks (ctest dist4)";
  compare_cp("tiny-llama", 2);      // DP 2 x CP 2
  compare_cp("tiny-gpt2", 4);       // CP 4
  compare_cp("tiny-qwen3-moe", 2);  // DP 2 x CP 2
}

// --attention eager under CP: each rank gathers the whole K/V (ops/context_gather_attention.h) and
// attends its chunks of queries to it. Measured at C = 2 (also with dropout, recompute core_attn and
// full, offload), DP 2 x CP 2 and CP 4: losses within 2.4e-7, weights within 3.7e-9, the ring's
// tolerances above; a dropout mask placed at the wrong rows moves the losses by 4.2e-3.
const std::vector<std::string> kEager = {"--attention", "eager"};

std::vector<std::string> eager_with(std::vector<std::string> more) {
  more.insert(more.begin(), kEager.begin(), kEager.end());
  return more;
}

TEST(ContextParallel, EagerAttentionOnTwoRanksTrainsLikeOneProcess) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  const auto [cp, one] = compare_cp("tiny-llama", 2, kEager);
  EXPECT_EQ(cp.logits * 2, one.logits);
  // The activations peak where the rank's dry run says (its layers keep the formula's bytes: dry_run_test).
  const TrainArgs eager = args_for(2, 2, "", "tiny-llama", eager_with({"--context-parallel-size", "2"}), 4, 16);
  EXPECT_EQ(plan::dry_run(eager.on(2), dist::world().rank()).device[MemoryCategory::activation].peak, cp.activation);
  compare_cp("tiny-gpt2", 2, eager_with(kDropout));  // the probabilities' dropout is one process's mask
  compare_cp("tiny-qwen3", 2, eager_with({"--recompute-granularity", "selective", "--recompute-modules", "core_attn"}));
  compare_cp("tiny-llama", 2, eager_with({"--activation-offload"}));
  compare_cp("tiny-gpt2", 2,
             eager_with({"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers",
                         "1", "--attention-dropout", "0.1"}));
}

TEST(ContextParallel, EagerAttentionOnFourRanksTrainsLikeOneProcess) {
  if (dist::world().size() != 4) GTEST_SKIP() << "runs on four ranks (ctest dist4)";
  compare_cp("tiny-llama", 2, kEager);               // DP 2 x CP 2
  compare_cp("tiny-gpt2", 4, eager_with(kDropout));  // CP 4
}

}  // namespace
}  // namespace tidal::train
