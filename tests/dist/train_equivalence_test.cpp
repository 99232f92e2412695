// Data-parallel training on this run's ranks against one process accumulating the same micro-batches
// (docs/distributed.md): the global batch is the same, so with one micro-batch per rank the losses and
// the trained weights are bit for bit those of one process; with several micro-batches per rank only
// the order of fp32 additions differs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>

#include "tidal/dist/collectives.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/train/trainer.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

std::string scratch_dir(const std::string& name, int ranks) {
  return std::string(TIDAL_BINARY_DIR) + "/dist_test_tmp/" + name + "_np" + std::to_string(ranks);
}

TrainArgs args_for(int64_t micro, int64_t global, const std::string& save, const std::string& model = "tiny-gpt2") {
  return parse_train_args({"--model", model, "--mock-data", "--train-iters", "4", "--seq-length", "16",
                           "--micro-batch-size", std::to_string(micro), "--global-batch-size", std::to_string(global),
                           "--attention-dropout", "0", "--hidden-dropout", "0", "--eval-interval", "0", "--save",
                           save, "--save-interval", "4"});
}

struct Run {
  TrainResult result;
  std::map<std::string, Tensor> weights;  // the saved model, read back by every rank
};

// Trains on `comm` (rank 0 saves to `dir`) and reads the weights back once every rank is done.
Run train_on(dist::Communicator& comm, dist::Communicator& world, const TrainArgs& args) {
  std::FILE* quiet = std::fopen("/dev/null", "w");
  Run run{run_training(args, quiet, comm), {}};
  std::fclose(quiet);
  world.barrier();  // rank 0 has saved
  run.weights = io::load_safetensors(args.save + "/iter_0000004/model.safetensors").tensors;
  return run;
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector<float>(), y = b.to_vector<float>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(double(x[i]) - double(y[i])));
  return worst;
}

void compare(const std::string& model, int64_t micro_per_rank, double tolerance) {
  dist::Communicator& world = dist::world();
  const int ranks = world.size();
  const int64_t micro = 2, global = micro * micro_per_rank * ranks;
  const std::string dir = scratch_dir(model + "_m" + std::to_string(micro_per_rank), ranks);
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  // N ranks, each running micro_per_rank micro-batches.
  const Run dp = train_on(world, world, args_for(micro, global, dir + "/ranks"));
  // One process (on every rank, alone) accumulating all of them.
  dist::SingleCommunicator single;
  const Run one = train_on(single, world, args_for(micro, global, dir + "/one_rank" + std::to_string(world.rank())));
  ASSERT_EQ(dp.result.losses.size(), one.result.losses.size());
  for (size_t i = 0; i < dp.result.losses.size(); ++i) {
    if (tolerance == 0) EXPECT_EQ(dp.result.losses[i], one.result.losses[i]) << "step " << i + 1;
    else EXPECT_NEAR(dp.result.losses[i], one.result.losses[i], tolerance) << "step " << i + 1;
  }
  ASSERT_EQ(dp.weights.size(), one.weights.size());
  for (const auto& [name, w] : one.weights) {
    ASSERT_TRUE(dp.weights.count(name)) << name;
    const double diff = max_abs_difference(dp.weights.at(name), w);
    if (tolerance == 0) EXPECT_EQ(diff, 0.0) << name;
    else EXPECT_LE(diff, tolerance) << name;
  }
}

TEST(DataParallel, OneMicroBatchPerRankIsBitwiseOneProcess) { compare("tiny-gpt2", 1, 0.0); }

TEST(DataParallel, OneMicroBatchPerRankIsBitwiseOneProcessForMoE) { compare("tiny-qwen3-moe", 1, 0.0); }

// Two micro-batches per rank: rank r adds its own two first, one process adds them in global order;
// fp32 rounding of a few additions, then 4 AdamW steps of lr 2e-3 (updates of ~lr each).
TEST(DataParallel, SeveralMicroBatchesPerRankAgreeToSummationOrder) { compare("tiny-gpt2", 2, 1e-5); }

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
