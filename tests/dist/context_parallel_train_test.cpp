// Context-parallel training (--context-parallel-size C, docs/distributed.md) against one process on
// the same global batch: each CP group trains on its data-parallel rank's samples, every rank on its
// two chunks of each sequence, and the gradients are summed over all ranks, so the losses and the
// trained weights are one process's up to the order of fp32 additions.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/dist/train_runs.h"
#include "tidal/allocator.h"
#include "tidal/dist/single_communicator.h"

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
  int64_t activation = 0, logits = 0;
};

// C ranks per CP group over this run's ranks, one micro-batch of 2 per data-parallel rank, against
// one process on the same global batch; flags `both` go to both runs. Returns (CP run, one process)
// activation and logits peaks of this rank.
std::pair<Peaks, Peaks> compare_cp(const std::string& model, int cp, std::vector<std::string> both = {},
                                   int64_t seq = 16) {
  dist::Communicator& world = dist::world();
  const int ranks = world.size();
  const int64_t micro = 2, global = micro * (ranks / cp);
  std::string tag = "cp" + std::to_string(cp) + "_" + model;
  for (const std::string& e : both) tag += e;
  const std::string dir = scratch_dir(tag, ranks);
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  Allocator& alloc = device_allocator(Device::cpu());
  const auto peaks = [&] {
    return Peaks{alloc.stats()[MemoryCategory::activation].peak, alloc.stats()[MemoryCategory::logits].peak};
  };
  std::vector<std::string> flags = both;
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
  expect_same(run, one, kWeightTolerance, kLossTolerance);
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

TEST(ContextParallel, TwoRanksWithRecomputeAndOffload) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  compare_cp("tiny-llama", 2,
             {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"});
  compare_cp("tiny-gpt2", 2, {"--recompute-granularity", "selective"});
  compare_cp("tiny-qwen3", 2, {"--activation-offload"});
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
  compare_cp("tiny-llama", 2);  // DP 2 x CP 2
  compare_cp("tiny-gpt2", 4);   // CP 4
}

}  // namespace
}  // namespace tidal::train
