#include "tests/dist/train_runs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "tidal/dist/single_communicator.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/causal_lm.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/optim/shard_layout.h"

namespace tidal::train {

namespace fs = std::filesystem;

std::string scratch_dir(const std::string& name, int ranks) {
  return std::string(TIDAL_BINARY_DIR) + "/dist_test_tmp/" + name + "_np" + std::to_string(ranks);
}

TrainArgs args_for(int64_t micro, int64_t global, const std::string& save, const std::string& model,
                   const std::vector<std::string>& extra, int64_t iters, int64_t seq) {
  // A preset's name, or a config.json (a test fixture).
  std::vector<std::string> argv = {model.ends_with(".json") ? "--config" : "--model",
                                   model,
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
  if (std::find(extra.begin(), extra.end(), "--data-path") == extra.end()) argv.push_back("--mock-data");
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
  run.weights = io::load_safetensors(args.checkpoint.save + "/iter_0000004/model.safetensors").tensors;
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

ResumedRuns resume_runs(dist::Communicator& world, const std::string& dir, const ResumeArgs& args) {
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  world.barrier();
  std::FILE* quiet = std::fopen("/dev/null", "w");
  run_training(args(dir + "/full", 4, "", true), quiet, world);
  run_training(args(dir + "/half", 2, "", true), quiet, world);
  world.barrier();
  run_training(args(dir + "/resumed", 4, dir + "/half", true), quiet, world);
  dist::SingleCommunicator single;
  const std::string own = dir + "/one" + std::to_string(world.rank());
  run_training(args(own, 4, dir + "/half", false), quiet, single);
  world.barrier();
  std::fclose(quiet);
  const auto model = [](const std::string& run) {  // with a LoRA run's adapters (their PEFT names)
    std::map<std::string, Tensor> t = io::load_safetensors(run + "/iter_0000004/model.safetensors").tensors;
    const std::string adapters = run + "/iter_0000004/adapter_model.safetensors";
    if (std::filesystem::exists(adapters))
      for (auto& [name, a] : io::load_safetensors(adapters).tensors) t.emplace(name, a);
    return t;
  };
  return {model(dir + "/full"), model(dir + "/resumed"), model(own)};
}

int64_t zero3_parameter_peak(const models::CausalLM& model, int64_t shard, bool prefetch) {
  std::vector<int64_t> per_layer(size_t(model.config().num_hidden_layers), 0);
  int64_t outer = 0;
  for (const auto& [name, p] : model.named_parameters()) {
    const int64_t l = model.layer_of_parameter(name);
    (l < 0 ? outer : per_layer[size_t(l)]) += p.numel();
  }
  int64_t layers = 0;
  for (size_t l = 0; l < per_layer.size(); ++l)
    layers = std::max(layers, per_layer[l] + (prefetch && l + 1 < per_layer.size() ? per_layer[l + 1] : 0));
  return shard + outer + layers;
}

int64_t zero3_parameter_peak(const TrainArgs& args, int ranks, int rank, bool prefetch) {
  auto model = models::create_model(args.model);
  std::vector<int64_t> numels;
  for (const auto& [name, p] : model->named_parameters()) numels.push_back(p.numel());
  return zero3_parameter_peak(*model, optim::make_shard_layout(numels, ranks, optim::kGradNormChunk).shard_size(rank),
                              prefetch);
}

}  // namespace tidal::train
