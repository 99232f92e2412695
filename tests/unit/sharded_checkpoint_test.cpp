// The distributed optimizer's checkpoint files (checkpoint/checkpoint.h) as one rank writes and reads
// them: state.json's layout record, each shard file's metadata, and what a resume checks before it
// uses them. The N-rank behaviour is tested under mpirun in tests/dist/checkpoint_test.cpp.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/support/error_of.h"
#include "tidal/checkpoint/load.h"
#include "tidal/checkpoint/save.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/io/atomic_file.h"
#include "tidal/train/trainer.h"

namespace tidal::checkpoint {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string fresh_dir(const char* name) {
  const std::string d = ::testing::TempDir() + "tidal_sharded_ckpt_" + name;
  fs::remove_all(d);
  return d;
}

// A one-rank sharded checkpoint of one parameter "w" of 4 elements at iteration 2.
std::string save_small(const std::string& dir) {
  dist::SingleCommunicator one;
  TrainingState st;
  st.iteration = 2;
  const std::map<std::string, Tensor> shard = {{"w.exp_avg", from_vector({1, 2, 3, 4}, {4})},
                                               {"w.exp_avg_sq", from_vector({5, 6, 7, 8}, {4})},
                                               {"w.step", from_vector_i64({2}, Shape{})},
                                               {"step", from_vector_i64({2}, Shape{})}};
  save_checkpoint(one, dir, st, sharded_files(whole_pieces({{"w", ones({4})}}), shard, {1, 16, {{"w", 4}}}, 0),
                  {{"model_type", "gpt2"}});
  return dir + "/iter_0000002/state.json";
}

TEST(ShardedCheckpointFiles, RecordsTheLayoutAndReadsBack) {
  const std::string dir = fresh_dir("roundtrip");
  const json s = json::parse(io::read_file(save_small(dir)));
  EXPECT_EQ(s["optimizer_shards"], json::parse(R"({"ranks": 1, "align": 16, "parameters": [["w", 4]]})"));
  EXPECT_TRUE(s["files"].contains("optimizer.rank00000-of-00001.safetensors"));
  EXPECT_FALSE(s["files"].contains("optimizer.safetensors"));
  const Checkpoint c = load_checkpoint(dir);
  EXPECT_EQ(c.shards.ranks, 1);
  EXPECT_EQ(c.shards.align, 16);
  EXPECT_EQ(c.shards.parameters, (std::vector<std::pair<std::string, int64_t>>{{"w", 4}}));
  EXPECT_TRUE(c.optimizer.empty());
  const auto shard = load_optimizer_shard(c, 0);
  EXPECT_EQ(shard.at("w.exp_avg_sq").to_vector<float>(), (std::vector<float>{5, 6, 7, 8}));
  EXPECT_EQ(shard.size(), 4u);
}

TEST(ShardedCheckpointFiles, StateErrorsNameTheField) {
  const std::string dir = fresh_dir("state");
  const std::string state = save_small(dir);
  const json good = json::parse(io::read_file(state));
  auto message_for = [&](const json& j) {
    std::ofstream(state, std::ios::trunc) << j.dump();
    return testing::error_of([&] { load_optimizer_shard(load_checkpoint(dir), 0); });
  };
  const std::string where = "[checkpoint] " + dir + "/iter_0000002/state.json field 'optimizer_shards";
  json j = good;
  j["optimizer_shards"]["ranks"] = 0;
  EXPECT_EQ(message_for(j), where + ".ranks' must be in [1, 99999], got 0");
  j["optimizer_shards"]["ranks"] = 2;  // the second rank's file is not there
  EXPECT_EQ(message_for(j),
            "[checkpoint] " + dir + "/iter_0000002/state.json lists no optimizer.rank00000-of-00002.safetensors");
  j = good;
  j["optimizer_shards"]["parameters"] = "w";
  EXPECT_EQ(message_for(j), where + ".parameters' must be a non-empty array, found a string");
  j["optimizer_shards"]["parameters"] = json::parse(R"([["w", -4]])");
  EXPECT_EQ(message_for(j), where + ".parameters[0]' numel is negative");
  j["optimizer_shards"]["parameters"] = json::parse(R"([["w", 35184372088832], ["v", 1]])");
  EXPECT_EQ(message_for(j), where + ".parameters' holds more than 2^45 elements: not a model's");
  j = good;
  j["optimizer_shards"]["align"] = 0;
  EXPECT_EQ(message_for(j), where + ".align' must be in [1, 2^45], got 0");
  j = good;  // one process's optimizer file in a sharded checkpoint
  j["files"]["optimizer.safetensors"] = j["files"]["optimizer.rank00000-of-00001.safetensors"];
  EXPECT_EQ(message_for(j), "[checkpoint] " + dir +
                                "/iter_0000002/state.json lists a file that is not part of a checkpoint of 1 "
                                "optimizer shards: 'optimizer.safetensors'");
  // A layout that does not describe the file (here: a longer parameter): its metadata says so.
  j = good;
  j["optimizer_shards"]["parameters"] = json::parse(R"([["w", 5]])");
  EXPECT_EQ(message_for(j), "[checkpoint] " + dir +
                                "/iter_0000002/optimizer.rank00000-of-00001.safetensors is not the optimizer shard "
                                "state.json describes: its metadata 'end' should be 5 (was the file copied from "
                                "another checkpoint?)");
  std::ofstream(state, std::ios::trunc) << good.dump();
  EXPECT_EQ(message_for(good), "no error");
}

// A resume checks the saved parameters' names and sizes against the model before it reads a shard.
TEST(ShardedCheckpointFiles, AResumeChecksTheSavedParameters) {
  const std::string dir = fresh_dir("resume");
  auto args = [&](int64_t iters, const std::string& load) {
    std::vector<std::string> argv = {"--model",
                                     "tiny-gpt2",
                                     "--mock-data",
                                     "--seq-length",
                                     "16",
                                     "--micro-batch-size",
                                     "2",
                                     "--global-batch-size",
                                     "2",
                                     "--eval-interval",
                                     "0",
                                     "--train-iters",
                                     std::to_string(iters),
                                     "--use-distributed-optimizer",
                                     "--save",
                                     dir};
    if (!load.empty()) argv.insert(argv.end(), {"--load", load});
    return train::parse_train_args(argv);
  };
  std::FILE* quiet = std::fopen("/dev/null", "w");
  train::run_training(args(2, ""), quiet);
  const std::string state = dir + "/iter_0000002/state.json";
  json j = json::parse(io::read_file(state));
  const std::string first = j["optimizer_shards"]["parameters"][0][0];
  j["optimizer_shards"]["parameters"][0][0] = "renamed";
  std::ofstream(state, std::ios::trunc) << j.dump();
  EXPECT_EQ(testing::error_of([&] { train::run_training(args(4, dir), quiet); }),
            "[checkpoint] " + dir +
                "/iter_0000002/state.json field 'optimizer_shards.parameters' names 'renamed' of 32768 elements as "
                "parameter 0, this model has '" +
                first + "' of 32768: use the same model flags as the run that saved it");
  j["optimizer_shards"]["parameters"].erase(0);
  std::ofstream(state, std::ios::trunc) << j.dump();
  EXPECT_EQ(testing::error_of([&] { train::run_training(args(4, dir), quiet); }),
            "[checkpoint] " + dir +
                "/iter_0000002/state.json field 'optimizer_shards.parameters' lists 27 parameters, this model has "
                "28: use the same model flags as the run that saved it");
  std::fclose(quiet);
}

}  // namespace
}  // namespace tidal::checkpoint
