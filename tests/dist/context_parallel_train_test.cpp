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
// kernels. Measured on the tiny models: losses within 1.2e-6 (of ~6.2), weights after 4 AdamW steps
// of lr 2e-3 within 2.4e-5 (Adam's normalized update amplifies rounding where a gradient is near 0;
// a missing block or chunk would move weights by ~lr = 2e-3).
constexpr double kLossTolerance = 1e-5, kWeightTolerance = 1e-4;

struct Peaks {
  int64_t activation = 0, logits = 0;
};

// C ranks per CP group over this run's ranks, one micro-batch of 2 per data-parallel rank, against
// one process on the same global batch; flags `both` go to both runs. Returns (CP run, one process)
// activation and logits peaks of this rank.
std::pair<Peaks, Peaks> compare_cp(const std::string& model, int cp, const std::vector<std::string>& both = {}) {
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
  const Run run = train_on(world, world, args_for(micro, global, dir + "/ranks", model, flags));
  const Peaks cp_peaks = peaks();
  dist::SingleCommunicator single;  // one process (on every rank, alone)
  const Run one =
      train_on(single, world, args_for(micro, global, dir + "/one_rank" + std::to_string(world.rank()), model, both));
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

TEST(ContextParallel, DataTimesContextParallelOnFourRanks) {
  if (dist::world().size() != 4) GTEST_SKIP() << "runs on four ranks (ctest dist4)";
  compare_cp("tiny-llama", 2);  // DP 2 x CP 2
  compare_cp("tiny-gpt2", 4);   // CP 4
}

}  // namespace
}  // namespace tidal::train
