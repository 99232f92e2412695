// Checkpoints under expert parallelism (--expert-model-parallel-size, docs/distributed.md "Expert
// parallel"): a save gathers every expert into one process's checkpoint, which resumes with any E and
// any number of ranks, and --pretrained gives each rank its experts out of a whole model's files.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/dist/expert_runs.h"
#include "tests/dist/train_runs.h"
#include "tidal/checkpoint/save.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/causal_lm.h"
#include "tidal/models/moe.h"
#include "tidal/models/pretrained.h"
#include "tidal/rng.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

// kWeightTolerance, kLossTolerance: E ranks against one process (tests/dist/expert_runs.h).
std::map<std::string, Tensor> read(const std::string& path) { return io::load_safetensors(path).tensors; }

// tiny-qwen3-moe, micro-batches of 2, as many as the world has ranks per step; with `e` > 1 expert
// parallel, saving every 2 steps to `save`, resuming from `load`.
TrainArgs moe_args(int e, const std::string& save, int64_t iters, const std::string& load) {
  std::vector<std::string> extra = {"--lr-decay-iters", "4"};  // one schedule at 2 and 4
  if (e > 1) extra.insert(extra.end(), {"--expert-model-parallel-size", std::to_string(e)});
  if (!load.empty()) extra.insert(extra.end(), {"--load", load});
  return args_for(2, 2 * dist::world().size(), save, "tiny-qwen3-moe", extra, iters);
}

// Saved under E = world size, resumed under the same E and under one process: the checkpoint is one
// process's (every expert and every expert's moments, by their global names) and both resumes
// continue the run (the E-rank resume bit for bit, one process to the expert-parallel tolerance).
void save_and_resume(int e) {
  dist::Communicator& world = dist::world();
  const std::string dir = scratch_dir("ep_checkpoint_e" + std::to_string(e), world.size());
  const ResumedRuns runs =
      resume_runs(world, dir, [&](const std::string& save, int64_t iters, const std::string& load, bool sharded) {
        return moe_args(sharded ? e : 1, save, iters, load);
      });
  expect_same_tensors(runs.resumed, runs.full, 0, "resumed under E=" + std::to_string(e));
  expect_same_tensors(runs.one, runs.full, kWeightTolerance, "resumed by one process");
  // The optimizer's states too: the expert-parallel resume's bit for bit.
  expect_same_tensors(read(dir + "/resumed/iter_0000004/optimizer.safetensors"),
                      read(dir + "/full/iter_0000004/optimizer.safetensors"), 0, "optimizer states");

  // One process's checkpoint of the same 2 steps has the same files and tensors.
  dist::SingleCommunicator single;
  const std::string own = dir + "/single" + std::to_string(world.rank());
  std::FILE* quiet = std::fopen("/dev/null", "w");
  run_training(moe_args(1, own, 2, ""), quiet, single);
  std::fclose(quiet);
  const std::string ep = dir + "/half/iter_0000002";
  std::vector<std::string> ep_files, one_files;
  for (const auto& f : fs::directory_iterator(ep)) ep_files.push_back(f.path().filename().string());
  for (const auto& f : fs::directory_iterator(own + "/iter_0000002")) one_files.push_back(f.path().filename().string());
  std::sort(ep_files.begin(), ep_files.end());
  std::sort(one_files.begin(), one_files.end());
  EXPECT_EQ(ep_files, one_files);
  const std::map<std::string, Tensor> model = read(ep + "/model.safetensors");
  expect_same_tensors(model, read(own + "/iter_0000002/model.safetensors"), kWeightTolerance, "saved model");
  expect_same_tensors(read(ep + "/optimizer.safetensors"), read(own + "/iter_0000002/optimizer.safetensors"),
                      kWeightTolerance, "saved optimizer");
  const models::ModelConfig m = models::preset("tiny-qwen3-moe");
  int64_t experts = 0;
  for (const auto& [name, t] : model) experts += models::is_expert_parameter(name);
  EXPECT_EQ(experts, 1 /*MoE layer*/ * m.num_experts * 3);
  world.barrier();
}

TEST(ExpertParallelCheckpoint, SavesOneProcessCheckpointThatResumesUnderAnyE) {
  const int n = dist::world().size();
  if (n < 2 || models::preset("tiny-qwen3-moe").num_experts % n != 0) GTEST_SKIP() << n << " ranks";
  save_and_resume(n);
}

// DP 2 × EP 2: only the expert-parallel group of rank 0 writes; its checkpoint resumes on 4 ranks and
// in one process.
TEST(ExpertParallelCheckpoint, DataAndExpertParallelOnFourRanks) {
  if (dist::world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  save_and_resume(2);
}

// --pretrained from a Hugging Face directory (config.json, model.safetensors with every expert):
// each rank reads its experts only, and trains as one process loading the whole model does.
TEST(ExpertParallelCheckpoint, PretrainedGivesEachRankItsExperts) {
  dist::Communicator& world = dist::world();
  const int n = world.size();
  if (n < 2 || models::preset("tiny-qwen3-moe").num_experts % n != 0) GTEST_SKIP() << n << " ranks";
  const std::string dir = scratch_dir("ep_pretrained", n);
  write_pretrained_moe(world, dir);
  std::vector<std::string> common = pretrained_moe_flags(dir, 2 * n);
  common.insert(common.end(), {"--save-interval", "2"});
  auto args = [&](int e, const std::string& save) {
    std::vector<std::string> argv = common;
    argv.insert(argv.end(), {"--save", save, "--expert-model-parallel-size", std::to_string(e)});
    return parse_train_args(argv);
  };
  std::FILE* quiet = std::fopen("/dev/null", "w");
  const TrainResult ep = run_training(args(n, dir + "/ep"), quiet, world);
  dist::SingleCommunicator single;
  const std::string own = dir + "/one" + std::to_string(world.rank());
  const TrainResult one = run_training(args(1, own), quiet, single);
  std::fclose(quiet);
  world.barrier();
  ASSERT_EQ(ep.losses.size(), one.losses.size());
  for (size_t i = 0; i < ep.losses.size(); ++i) EXPECT_NEAR(ep.losses[i], one.losses[i], kLossTolerance) << i;
  expect_same_tensors(read(dir + "/ep/iter_0000002/model.safetensors"), read(own + "/iter_0000002/model.safetensors"),
                      kWeightTolerance, "trained from --pretrained");
  // The directory's weights were loaded: a run from the seed's weights starts elsewhere.
  const TrainArgs fresh =
      args_for(2, 2 * n, "", "tiny-qwen3-moe", {"--expert-model-parallel-size", std::to_string(n)}, 1);
  std::FILE* quiet2 = std::fopen("/dev/null", "w");
  const TrainResult scratch = run_training(fresh, quiet2, world);
  std::fclose(quiet2);
  EXPECT_NE(scratch.losses[0], ep.losses[0]);
}

// A save that fails on one rank fails every rank of the group, and leaves no checkpoint: a NaN in rank
// 1's expert (before anything is written), and rank 0 failing between the model's file and the
// optimizer's (a tokenizer that is not there) while rank 1 still has its optimizer states to send:
// rank 0 takes them (drops them) so rank 1 does not wait, and both report the failure.
TEST(ExpertParallelCheckpoint, AFailedSaveFailsEveryRankOfTheGroup) {
  dist::Communicator& world = dist::world();
  if (world.size() != 2) GTEST_SKIP() << "runs on two ranks";
  const std::string dir = scratch_dir("ep_failed_save", 2);
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  const std::string mine = "model.layers.1.mlp.experts." + std::to_string(world.rank()) + ".up_proj.weight";
  const std::map<std::string, Tensor> model = {{"model.norm.weight", ones({4})}, {mine, ones({2, 3})}};
  const std::map<std::string, Tensor> optimizer = {{mine + ".exp_avg", ones({2, 3})}, {"step", ones({1})}};
  const checkpoint::TrainingState state{2, {}, 0, nlohmann::json::object(), nlohmann::json::object()};
  const nlohmann::json config = models::config_to_json(models::preset("tiny-qwen3-moe"));
  auto failure = [&](const std::map<std::string, Tensor>& m, const std::string& tokenizer,
                     const std::map<std::string, Tensor>& o) {
    try {
      // Rank 0 saves every tensor it holds, rank 1 its experts (checkpoint/rank_state.h's rule).
      const auto mine = [&](const std::map<std::string, Tensor>& all) {
        std::vector<optim::TensorPiece> out;
        for (const auto& [name, t] : all)
          if (world.rank() == 0 || models::is_expert_parameter(name)) out.push_back({name, t.shape(), 0, t});
        return out;
      };
      checkpoint::save_checkpoint(world, dir, state, checkpoint::one_process_files(mine(m), mine(o)), config,
                                  tokenizer);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::map<std::string, Tensor> nan = model;
  if (world.rank() == 1) nan[mine] = full({2, 3}, std::nan(""));
  const std::string a = failure(nan, "", optimizer);
  EXPECT_NE(a.find("iteration 2 was not saved, on rank 1 of 2"), std::string::npos) << a;
  EXPECT_NE(a.find("holds NaN"), std::string::npos) << a;
  const std::string b = failure(model, dir + "/no-tokenizer.json", optimizer);
  EXPECT_NE(b.find("iteration 2 was not saved, on rank 0 of 2"), std::string::npos) << b;
  EXPECT_EQ(checkpoint::latest_iteration(dir), -1);
  // And a good save after them: every expert in the files, rank 1's states those of this save (had
  // rank 0 not taken the failed save's, they would arrive here in their place).
  const std::map<std::string, Tensor> later = {{mine + ".exp_avg", full({2, 3}, 2.0)}, {"step", ones({1})}};
  EXPECT_EQ(failure(model, "", later), "no error");
  world.barrier();
  const std::map<std::string, Tensor> saved = read(dir + "/iter_0000002/model.safetensors");
  EXPECT_EQ(saved.size(), 3u);
  EXPECT_TRUE(saved.count("model.layers.1.mlp.experts.1.up_proj.weight"));
  const std::map<std::string, Tensor> states = read(dir + "/iter_0000002/optimizer.safetensors");
  ASSERT_EQ(states.size(), 3u);
  EXPECT_EQ(states.at("model.layers.1.mlp.experts.1.up_proj.weight.exp_avg").to_vector<float>()[0], 2.0f);
}

}  // namespace
}  // namespace tidal::train
