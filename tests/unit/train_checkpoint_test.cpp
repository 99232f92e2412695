#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "tests/support/error_of.h"
#include "tests/support/gradcheck.h"
#include "tidal/checkpoint/format.h"
#include "tidal/checkpoint/load.h"
#include "tidal/checkpoint/save.h"
#include "tidal/ops/random.h"

namespace tidal::checkpoint {
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

// state.json is read field by field: errors name the file and the field and never echo the file.
TEST(TrainCheckpoint, StateErrorsNameTheFieldAndNeverEchoIt) {
  const std::string dir = fresh_dir("state");
  save_checkpoint(dir, state_at(2), weights(1), {}, {{"model_type", "gpt2"}});
  const std::string state = dir + "/iter_0000002/state.json";
  const std::string good = [&] {
    std::ifstream f(state);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }();
  auto message_for = [&](const std::string& text) {
    std::ofstream(state, std::ios::trunc) << text;
    return testing::error_of([&] { load_checkpoint(dir); });
  };
  auto has = [](const std::string& msg, const std::string& part) { return msg.find(part) != std::string::npos; };
  EXPECT_TRUE(has(message_for("secret garbage"), "state.json is not valid JSON (syntax error near byte"));
  EXPECT_FALSE(has(message_for("secret garbage"), "secret"));
  EXPECT_TRUE(
      has(message_for(R"({"iteration":"2"})"), "state.json field 'iteration' must be an integer, found a string"));
  EXPECT_TRUE(has(message_for(R"({"iteration":2})"), "state.json has no field 'rng'"));
  EXPECT_TRUE(has(message_for(R"({"iteration":2,"rng":{"seed":-1,"offset":0},"data_position":0})"),
                  "field 'rng.seed' is negative"));
  EXPECT_TRUE(has(message_for(R"({"iteration":2,"rng":{"seed":1,"offset":0},"data_position":0,"settings":[1]})"),
                  "field 'settings' must be an object, found an array"));
  EXPECT_TRUE(has(message_for(std::string(100000, '[') + std::string(100000, ']')), "nested more than 512 levels"));
  // A file list naming a path outside the checkpoint is refused before anything is read.
  nlohmann::json j = nlohmann::json::parse(good);
  j["files"]["../../../dev/zero"] = {{"size", 1}, {"crc32", 0}};
  std::string msg = message_for(j.dump());
  EXPECT_TRUE(has(msg, "lists a file that is not part of a checkpoint: '../../../dev/zero'")) << msg;
  j = nlohmann::json::parse(good);
  j["files"].erase("optimizer.safetensors");
  EXPECT_TRUE(has(message_for(j.dump()), "state.json lists no optimizer.safetensors"));
  j = nlohmann::json::parse(good);
  j["files"]["config.json"]["crc32"] = int64_t(1) << 40;
  EXPECT_TRUE(has(message_for(j.dump()), "field 'files.config.json.crc32' is not a CRC-32"));
  std::ofstream(state, std::ios::trunc) << good;
  EXPECT_EQ(load_checkpoint(dir).state.iteration, 2);
  // The tracker: a number and nothing else, never echoed.
  std::ofstream(dir + "/latest_checkpointed_iteration.txt") << "2 secret";
  msg = testing::error_of([&] { load_checkpoint(dir); });
  EXPECT_TRUE(has(msg, "latest_checkpointed_iteration.txt is corrupted")) << msg;
  EXPECT_FALSE(has(msg, "secret")) << msg;
}

// No checkpoint ever holds a NaN or an infinity.
TEST(TrainCheckpoint, NonFiniteWeightsAreNeverSaved) {
  const std::string dir = fresh_dir("nonfinite");
  save_checkpoint(dir, state_at(1), weights(1), {}, {{"model_type", "gpt2"}});
  std::map<std::string, Tensor> bad = weights(2);
  bad["b.bias"].data<float>()[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(testing::error_of([&] {
              save_checkpoint(dir, state_at(2), bad, {}, {{"model_type", "gpt2"}});
            }),
            "[checkpoint] refusing to save iteration 2: parameter b.bias holds NaN or infinite values (training "
            "diverged; --check-for-nan-in-loss-and-grad, on by default, stops at the step that does it)");
  std::map<std::string, Tensor> moments = {{"a.weight.exp_avg", full({2}, std::numeric_limits<double>::infinity())}};
  EXPECT_NE(testing::error_of([&] {
              save_checkpoint(dir, state_at(2), weights(2), moments, {});
            }).find("optimizer state a.weight.exp_avg holds NaN"),
            std::string::npos);
  EXPECT_EQ(latest_iteration(dir), 1);
  EXPECT_FALSE(fs::exists(dir + "/iter_0000002"));
}

// --save before the first step: made, probed, and cleared of what a killed save left.
TEST(TrainCheckpoint, PrepareSaveDirRemovesOnlyPartialSaves) {
  const std::string dir = fresh_dir("prepare");
  EXPECT_TRUE(prepare_save_dir(dir).removed.empty());  // made
  save_checkpoint(dir, state_at(1), weights(1), {}, {{"model_type", "gpt2"}});
  fs::create_directories(dir + "/iter_0000002.tmp-4242/");
  std::ofstream(dir + "/iter_0000002.tmp-4242/model.safetensors") << "half";
  std::ofstream(dir + "/latest_checkpointed_iteration.txt.tmp.4242") << "2";
  std::ofstream(dir + "/notes.txt") << "mine";
  EXPECT_EQ(prepare_save_dir(dir).removed,
            (std::vector<std::string>{"iter_0000002.tmp-4242", "latest_checkpointed_iteration.txt.tmp.4242"}));
  EXPECT_TRUE(fs::exists(dir + "/notes.txt"));
  EXPECT_TRUE(fs::exists(dir + "/iter_0000001"));
  EXPECT_EQ(load_checkpoint(dir).state.iteration, 1);
  for (const auto& e : fs::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find("probe"), std::string::npos) << e.path();
  if (::geteuid() != 0) {  // root writes anywhere
    fs::permissions(dir, fs::perms::owner_write, fs::perm_options::remove);
    EXPECT_NE(testing::error_of([&] { prepare_save_dir(dir); }).find("--save " + dir + ": cannot write there"),
              std::string::npos);
    fs::permissions(dir, fs::perms::owner_write, fs::perm_options::add);
  }
}

// One run per --save (issue 33; Note [One run per --save]): a second lock on the directory, even from the same
// process, is refused naming the holder's pid and host, the holder's save in progress and its lock file stay
// (a refused run used to remove the holder's lock file on its way out, so a third run got a lock of its own),
// and once the holder ends the next run takes over and clears what it left.
TEST(TrainCheckpoint, ASecondLockOnASaveDirIsRefusedNamingPidAndHost) {
  const std::string dir = fresh_dir("lock");
  char host[256] = {0};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const std::string holder = std::to_string(::getpid()) + " on host " + host;
  {
    PreparedSave first = prepare_save_dir(dir);
    fs::create_directories(dir + "/iter_0000003.tmp-" + std::to_string(::getpid()));  // its save in progress
    for (int run = 2; run <= 3; ++run) {
      const std::string said = testing::error_of([&] { prepare_save_dir(dir); });
      EXPECT_NE(said.find("--save " + dir + " is in use by another tidal train (pid " + holder + ", as its lock file " +
                          dir + "/.tidal-save.lock says)"),
                std::string::npos)
          << "run " << run << ": " << said;
      EXPECT_TRUE(fs::exists(dir + "/.tidal-save.lock")) << "run " << run;
      EXPECT_TRUE(fs::exists(dir + "/iter_0000003.tmp-" + std::to_string(::getpid()))) << "run " << run;
    }
  }
  EXPECT_FALSE(fs::exists(dir + "/.tidal-save.lock"));  // the holder ended
  const PreparedSave next = prepare_save_dir(dir);
  EXPECT_EQ(next.removed, std::vector<std::string>{"iter_0000003.tmp-" + std::to_string(::getpid())});
}

}  // namespace tidal::checkpoint
