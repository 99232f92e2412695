#include "tests/dist/train_runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "tidal/dist/single_communicator.h"
#include "tidal/io/safetensors.h"

namespace tidal::train {

namespace fs = std::filesystem;

std::string scratch_dir(const std::string& name, int ranks) {
  return std::string(TIDAL_BINARY_DIR) + "/dist_test_tmp/" + name + "_np" + std::to_string(ranks);
}

TrainArgs args_for(int64_t micro, int64_t global, const std::string& save, const std::string& model,
                   const std::vector<std::string>& extra, int64_t iters, int64_t seq) {
  std::vector<std::string> argv = {"--model",
                                   model,
                                   "--mock-data",
                                   "--train-iters",
                                   std::to_string(iters),
                                   "--seq-length",
                                   std::to_string(seq),
                                   "--micro-batch-size",
                                   std::to_string(micro),
                                   "--global-batch-size",
                                   std::to_string(global),
                                   "--eval-interval",
                                   "0"};
  for (const char* flag : {"--attention-dropout", "--hidden-dropout"})  // 0 unless `extra` sets it
    if (std::find(extra.begin(), extra.end(), flag) == extra.end()) argv.insert(argv.end(), {flag, "0"});
  if (!save.empty()) argv.insert(argv.end(), {"--save", save, "--save-interval", "2"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return parse_train_args(argv);
}

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

void expect_same(const Run& dp, const Run& one, double tolerance, double loss_tolerance) {
  ASSERT_EQ(dp.result.losses.size(), one.result.losses.size());
  for (size_t i = 0; i < dp.result.losses.size(); ++i) {
    if (loss_tolerance == 0)
      EXPECT_EQ(dp.result.losses[i], one.result.losses[i]) << "step " << i + 1;
    else
      EXPECT_NEAR(dp.result.losses[i], one.result.losses[i], loss_tolerance) << "step " << i + 1;
  }
  ASSERT_EQ(dp.weights.size(), one.weights.size());
  for (const auto& [name, w] : one.weights) {
    ASSERT_TRUE(dp.weights.count(name)) << name;
    const double diff = max_abs_difference(dp.weights.at(name), w);
    if (tolerance == 0)
      EXPECT_EQ(diff, 0.0) << name;
    else
      EXPECT_LE(diff, tolerance) << name;
  }
}

void compare(const std::string& model, int64_t micro_per_rank, double tolerance, const std::vector<std::string>& extra,
             double loss_tolerance, const std::vector<std::string>& both) {
  dist::Communicator& world = dist::world();
  const int ranks = world.size();
  const int64_t micro = 2, global = micro * micro_per_rank * ranks;
  std::string tag = model + "_m" + std::to_string(micro_per_rank);
  for (const std::string& e : extra) tag += e;
  for (const std::string& e : both) tag += e;
  std::vector<std::string> dp_flags = both;
  dp_flags.insert(dp_flags.end(), extra.begin(), extra.end());
  const std::string dir = scratch_dir(tag, ranks);
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  const Run dp = train_on(world, world, args_for(micro, global, dir + "/ranks", model, dp_flags));
  dist::SingleCommunicator single;  // one process (on every rank, alone)
  const Run one =
      train_on(single, world, args_for(micro, global, dir + "/one_rank" + std::to_string(world.rank()), model, both));
  expect_same(dp, one, tolerance, loss_tolerance < 0 ? tolerance : loss_tolerance);
}

}  // namespace tidal::train
