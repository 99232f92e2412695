// Checkpoints of expert parallelism with a sharded optimizer (docs/distributed.md "Expert parallel"):
// rank 0 gathers one process's files from every rank's pieces (the dense states' over all N ranks,
// an expert's over its expert-data-parallel group), tensor by tensor; they resume bit for bit under
// the same flags and within the expert-parallel tolerance under another E, sharding strategy or
// number of ranks, and a no_shard run's checkpoint resumes a sharded one. tiny-qwen3-moe, 4 steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
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

std::map<std::string, Tensor> read(const std::string& path) { return io::load_safetensors(path).tensors; }

void expect_same_losses(const std::vector<double>& got, const std::vector<double>& want, double tolerance,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tolerance) << what << ": step " << i;
}

// tiny-qwen3-moe, one micro-batch of 2 per rank and step, the flags `layout` (E, strategy), saving
// every 2 steps to `save`, resuming from `load`.
TrainArgs run_args(const std::vector<std::string>& layout, const std::string& save, int64_t iters,
                   const std::string& load) {
  std::vector<std::string> extra = {"--lr-decay-iters", "4"};  // one schedule at 2 and 4
  extra.insert(extra.end(), layout.begin(), layout.end());
  if (!load.empty()) extra.insert(extra.end(), {"--load", load});
  return args_for(2, 2 * dist::world().size(), save, "tiny-qwen3-moe", extra, iters);
}

std::vector<std::string> ep2(const std::string& strategy) {
  return {"--expert-model-parallel-size", "2", "--data-parallel-sharding-strategy", strategy};
}

// The training losses of `args` on the world; its saves where args.checkpoint.save says.
std::vector<double> losses_of(const TrainArgs& args) {
  std::FILE* quiet = std::fopen("/dev/null", "w");
  const TrainResult r = run_training(args, quiet, dist::world());
  std::fclose(quiet);
  dist::world().barrier();
  return r.losses;
}

std::string checkpoint_dir(const std::string& strategy, const std::vector<std::string>& both) {
  std::string name = "ep_sharded_checkpoint_" + strategy;
  for (const std::string& f : both) name += f;
  return name;
}

// `saved` (E = 2 with the strategy) saved at step 2 and continued to 4, uninterrupted and resumed;
// the resume bit for bit (losses, weights, optimizer states), the one-process files of every expert.
// Then the same checkpoint resumed under each of `others` to the expert-parallel tolerance. `both`:
// flags of every run.
void save_and_resume(const std::string& strategy, const std::vector<std::vector<std::string>>& others,
                     const std::vector<std::string>& both = {}) {
  dist::Communicator& world = dist::world();
  const std::string dir = scratch_dir(checkpoint_dir(strategy, both), world.size());
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  std::vector<std::string> layout = ep2(strategy);
  layout.insert(layout.end(), both.begin(), both.end());
  const std::vector<double> full = losses_of(run_args(layout, dir + "/full", 4, ""));
  losses_of(run_args(layout, dir + "/half", 2, ""));
  const std::vector<double> resumed = losses_of(run_args(layout, dir + "/resumed", 4, dir + "/half"));
  EXPECT_EQ(resumed, std::vector<double>(full.begin() + 2, full.end()));
  const std::string end = "/iter_0000004/";
  expect_same_tensors(read(dir + "/resumed" + end + "model.safetensors"),
                      read(dir + "/full" + end + "model.safetensors"), 0, strategy + " resumed: weights");
  expect_same_tensors(read(dir + "/resumed" + end + "optimizer.safetensors"),
                      read(dir + "/full" + end + "optimizer.safetensors"), 0, strategy + " resumed: optimizer states");
  // One process's files: every expert and every expert's moments, by their global names.
  EXPECT_FALSE(fs::exists(dir + "/half/iter_0000002/" + checkpoint::optimizer_shard_file(0, world.size())));
  const models::ModelConfig m = models::preset("tiny-qwen3-moe");
  int64_t moments = 0;
  for (const auto& [name, t] : read(dir + "/half/iter_0000002/optimizer.safetensors"))
    moments += models::is_expert_parameter(name) && name.size() > 8 && name.substr(name.size() - 8) == ".exp_avg";
  EXPECT_EQ(moments, 1 /*MoE layer*/ * m.num_experts * 3);
  for (size_t k = 0; k < others.size(); ++k) {
    std::string what = strategy + " resumed under";
    for (const std::string& f : others[k]) what += " " + f;
    const std::string to = dir + "/other" + std::to_string(k);
    std::vector<std::string> flags = others[k];
    flags.insert(flags.end(), both.begin(), both.end());
    const std::vector<double> other = losses_of(run_args(flags, to, 4, dir + "/half"));
    expect_same_losses(other, std::vector<double>(full.begin() + 2, full.end()), kLossTolerance, what);
    expect_same_tensors(read(to + end + "model.safetensors"), read(dir + "/full" + end + "model.safetensors"),
                        kWeightTolerance, what);
  }
}

// ZeRO-2: resumed bit for bit, and under no_shard with E = 1 (data parallel) and E = 2, and ZeRO-1.
TEST(ExpertParallelShardedCheckpoint, ResumesBitForBitAndUnderOtherLayouts) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks";
  save_and_resume("optim_grads", {{"--expert-model-parallel-size", "1"},
                                  {"--expert-model-parallel-size", "2"},
                                  {"--expert-model-parallel-size", "2", "--use-distributed-optimizer"}});
}

// ZeRO-3 (the parameters sharded too: the model is gathered for rank 0 to write).
TEST(ExpertParallelShardedCheckpoint, ParametersShardedResumeBitForBit) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks";
  save_and_resume("optim_grads_params", {{"--expert-model-parallel-size", "1"}});
}

// --bf16: the f32 master weights are pieces of the optimizer's states too.
TEST(ExpertParallelShardedCheckpoint, Bf16MasterWeightsResumeBitForBit) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks";
  save_and_resume("optim_grads", {}, {"--bf16"});
  const std::string dir = scratch_dir(checkpoint_dir("optim_grads", {"--bf16"}), 2);
  int64_t masters = 0;
  for (const auto& [name, t] : read(dir + "/half/iter_0000002/optimizer.safetensors"))
    if (models::is_expert_parameter(name) && name.size() > 7 && name.substr(name.size() - 7) == ".master") {
      ++masters;
      EXPECT_EQ(t.dtype(), DType::f32) << name;
    }
  EXPECT_EQ(masters, 1 /*MoE layer*/ * models::preset("tiny-qwen3-moe").num_experts * 3);
}

// DP 2 × EP 2: each expert's states are sharded over two ranks, the dense ones' over four.
TEST(ExpertParallelShardedCheckpoint, DataAndExpertParallelOnFourRanks) {
  if (dist::world().size() != 4) GTEST_SKIP() << "needs 4 ranks";
  save_and_resume("optim_grads", {{"--expert-model-parallel-size", "1"}});
}

// A no_shard E = 2 checkpoint resumes an E = 2 run with a sharding strategy: the same losses and
// weights as the no_shard run continued, to the expert-parallel tolerance.
TEST(ExpertParallelShardedCheckpoint, NoShardCheckpointResumesShardedRun) {
  dist::Communicator& world = dist::world();
  if (world.size() != 2) GTEST_SKIP() << "runs on two ranks";
  const std::string dir = scratch_dir("ep_no_shard_to_sharded", world.size());
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  const std::vector<std::string> no_shard = {"--expert-model-parallel-size", "2"};
  const std::vector<double> full = losses_of(run_args(no_shard, dir + "/full", 4, ""));
  losses_of(run_args(no_shard, dir + "/half", 2, ""));
  for (const std::string strategy : {"optim_grads", "optim_grads_params"}) {
    const std::string to = dir + "/" + strategy;
    const std::vector<double> resumed = losses_of(run_args(ep2(strategy), to, 4, dir + "/half"));
    expect_same_losses(resumed, std::vector<double>(full.begin() + 2, full.end()), kLossTolerance, strategy);
    expect_same_tensors(read(to + "/iter_0000004/model.safetensors"),
                        read(dir + "/full/iter_0000004/model.safetensors"), kWeightTolerance,
                        "no_shard checkpoint resumed under " + strategy);
  }
}

// --pretrained with E = 2 and ZeRO-3: each rank takes its experts from the whole model's files and
// trains as one process from the same files does.
TEST(ExpertParallelShardedCheckpoint, PretrainedWithParametersSharded) {
  dist::Communicator& world = dist::world();
  if (world.size() != 2) GTEST_SKIP() << "runs on two ranks";
  const std::string dir = scratch_dir("ep_sharded_pretrained", world.size());
  write_pretrained_moe(world, dir);
  auto args = [&](const std::vector<std::string>& layout, int64_t global) {
    std::vector<std::string> argv = pretrained_moe_flags(dir, global);
    argv.insert(argv.end(), layout.begin(), layout.end());
    return parse_train_args(argv);
  };
  std::FILE* quiet = std::fopen("/dev/null", "w");
  const TrainResult ep = run_training(args(ep2("optim_grads_params"), 4), quiet, world);
  dist::SingleCommunicator single;
  const TrainResult one = run_training(args({}, 4), quiet, single);
  std::fclose(quiet);
  world.barrier();
  expect_same_losses(ep.losses, one.losses, kLossTolerance, "--pretrained");
}

// The gathering itself on two ranks: a tensor's pieces on both ranks assembled in place, rank 1's
// whole expert received; a NaN in rank 1's piece, and rank 0 failing between the model's file and
// the optimizer's (a tokenizer that is not there) while rank 1 still has pieces to send, fail every
// rank naming the rank and leave no checkpoint; a save after them holds that save's pieces.
TEST(ExpertParallelShardedCheckpoint, GathersPiecesAndAFailureFailsEveryRank) {
  dist::Communicator& world = dist::world();
  if (world.size() != 2) GTEST_SKIP() << "runs on two ranks";
  const std::string dir = scratch_dir("ep_gathered_save", 2);
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  const int me = world.rank();
  const std::string expert = "model.layers.1.mlp.experts." + std::to_string(me) + ".up_proj.weight";
  std::vector<optim::TensorPiece> model = {{expert, Shape{2, 3}, 0, full({2, 3}, 1.0 + me)}};
  if (me == 0) model.push_back({"model.norm.weight", Shape{4}, 0, ones({4})});
  // The norm's moment: elements [0, 3) on rank 0, [3, 4) on rank 1, flat.
  auto states = [&](double scale) {
    std::vector<optim::TensorPiece> o = {
        {"model.norm.weight.exp_avg", Shape{4}, me == 0 ? 0 : 3,
         me == 0 ? from_vector({scale, 2 * scale, 3 * scale}, Shape{3}) : from_vector({4 * scale}, Shape{1})}};
    if (me == 0) o.push_back({"step", Shape{}, 0, from_vector_i64({2}, Shape{})});
    return o;
  };
  const checkpoint::TrainingState state{2, {}, 0, nlohmann::json::object(), nlohmann::json::object()};
  const nlohmann::json config = models::config_to_json(models::preset("tiny-qwen3-moe"));
  auto failure = [&](const std::vector<optim::TensorPiece>& o, const std::string& tokenizer) {
    try {
      checkpoint::save_checkpoint(world, dir, state, checkpoint::one_process_files(model, o), config, tokenizer);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  std::vector<optim::TensorPiece> nan = states(1);
  if (me == 1) nan[0].data = full({1}, std::nan(""));
  const std::string a = failure(nan, "");
  EXPECT_NE(a.find("iteration 2 was not saved, on rank 1 of 2"), std::string::npos) << a;
  EXPECT_NE(a.find("optimizer state model.norm.weight.exp_avg holds NaN"), std::string::npos) << a;
  const std::string b = failure(states(1), dir + "/no-tokenizer.json");
  EXPECT_NE(b.find("iteration 2 was not saved, on rank 0 of 2"), std::string::npos) << b;
  EXPECT_EQ(checkpoint::latest_iteration(dir), -1);
  EXPECT_EQ(failure(states(10), ""), "no error");
  world.barrier();
  const std::map<std::string, Tensor> saved = read(dir + "/iter_0000002/model.safetensors");
  ASSERT_EQ(saved.size(), 3u);
  EXPECT_EQ(saved.at("model.layers.1.mlp.experts.1.up_proj.weight").to_vector<float>(), std::vector<float>(6, 2.f));
  const std::map<std::string, Tensor> moments = read(dir + "/iter_0000002/optimizer.safetensors");
  ASSERT_EQ(moments.size(), 2u);
  EXPECT_EQ(moments.at("model.norm.weight.exp_avg").to_vector<float>(), std::vector<float>({10, 20, 30, 40}));
  EXPECT_EQ(moments.at("step").to(DType::i64).item<int64_t>(), 2);
}

}  // namespace
}  // namespace tidal::train
