#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/gradcheck.h"
#include "tidal/ops/random.h"
#include "tidal/train/checkpoint.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const char* name) {
  const std::string d = ::testing::TempDir() + "tidal_ckpt_" + name;
  fs::remove_all(d);
  return d;
}

TrainingState state_at(int64_t it) {
  TrainingState s;
  s.iteration = it;
  s.rng = {42, uint64_t(it) * 64};
  s.data_position = it * 8;
  s.settings = {{"lr", 0.001}};
  return s;
}

std::map<std::string, Tensor> weights(uint64_t seed) {
  manual_seed(seed);
  return {{"a.weight", randn({4, 3})}, {"b.bias", randn({3})}};
}

void flip_byte(const std::string& path, std::streamoff at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c;
  f.get(c);
  f.seekp(at);
  f.put(char(c ^ 0x5a));
}

}  // namespace

TEST(TrainCheckpoint, SavesAndLoadsTheLatest) {
  const std::string dir = fresh_dir("roundtrip");
  EXPECT_EQ(latest_iteration(dir), -1);
  save_checkpoint(dir, state_at(10), weights(1), {{"exp_avg.a.weight", zeros({4, 3})}}, {{"model_type", "gpt2"}});
  save_checkpoint(dir, state_at(20), weights(2), {{"exp_avg.a.weight", ones({4, 3})}}, {{"model_type", "gpt2"}});
  EXPECT_EQ(latest_iteration(dir), 20);
  Checkpoint c = load_checkpoint(dir);
  EXPECT_EQ(c.state.iteration, 20);
  EXPECT_EQ(c.state.rng, (RngState{42, 20 * 64}));
  EXPECT_EQ(c.state.data_position, 160);
  EXPECT_EQ(c.config["model_type"], "gpt2");
  EXPECT_TRUE(testing::bitwise_equal(c.model["a.weight"], weights(2)["a.weight"]));
  EXPECT_TRUE(testing::bitwise_equal(c.optimizer["exp_avg.a.weight"], ones({4, 3})));
  EXPECT_TRUE(fs::exists(dir + "/iter_0000010/model.safetensors"));  // the previous one stays
}

TEST(TrainCheckpoint, CorruptionIsReportedWithTheFile) {
  const std::string dir = fresh_dir("corrupt");
  save_checkpoint(dir, state_at(5), weights(1), {}, {{"model_type", "gpt2"}});
  const std::string model = dir + "/iter_0000005/model.safetensors";
  flip_byte(model, std::streamoff(fs::file_size(model) - 3));
  try {
    load_checkpoint(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.safetensors is corrupted"), std::string::npos) << e.what();
  }
  fs::resize_file(model, 100);
  try {
    load_checkpoint(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  std::ofstream(dir + "/latest_checkpointed_iteration.txt") << "7\n";
  EXPECT_THROW(load_checkpoint(dir), Error);  // names a directory that does not exist
  std::ofstream(dir + "/latest_checkpointed_iteration.txt") << "garbage";
  EXPECT_THROW(load_checkpoint(dir), Error);
  EXPECT_THROW(load_checkpoint(dir + "/nope"), Error);
}

TEST(TrainCheckpoint, AFailedSaveLeavesThePreviousCheckpoint) {
  const std::string dir = fresh_dir("failed");
  save_checkpoint(dir, state_at(3), weights(1), {}, {{"model_type", "gpt2"}});
  std::map<std::string, Tensor> bad = weights(2);
  bad["meta"] = empty({2}, DType::f32, Device::meta());  // cannot be saved
  EXPECT_THROW(save_checkpoint(dir, state_at(4), bad, {}, {{"model_type", "gpt2"}}), Error);
  EXPECT_EQ(latest_iteration(dir), 3);
  EXPECT_FALSE(fs::exists(dir + "/iter_0000004"));
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  EXPECT_EQ(load_checkpoint(dir).state.iteration, 3);
}

}  // namespace tidal::train
