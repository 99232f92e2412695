// `tidal train --mtp-num-layers` (DeepSeek-V3's multi-token prediction, docs/training.md): a resume is bit for bit,
// every memory feature trains the same model bit for bit (the MTP depths' weights included; chunked loss sums the
// shared head's gradients in another order: tests/models/mtp_test.cpp checks it against the reference), the depths'
// losses are logged as Megatron names them, and what it cannot do is refused by name. (Against transformers' classes:
// tests/models/mtp_test.cpp; several ranks: tests/dist.)
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/integration/run_command.h"
#include "tests/integration/train_helpers.h"
#include "tidal/checkpoint/load.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/config.h"

namespace tidal::train {
namespace {

const std::string kTidal = std::string(TIDAL_BINARY_DIR) + "/tidal";

// tiny-deepseek-v3 with two MTP depths, two micro-batches a step.
std::vector<std::string> mtp_run(const std::vector<std::string>& more, int64_t iters = 3) {
  return constant_lr_run("tiny-deepseek-v3", 4, "3e-3", iters, with({"--mtp-num-layers", "2"}, more));
}

std::map<std::string, Tensor> weights_of(const std::string& save) { return checkpoint::load_checkpoint(save).model; }

void expect_bitwise(const std::map<std::string, Tensor>& a, const std::map<std::string, Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  int mtp = 0;
  for (const auto& [name, t] : b) {
    ASSERT_TRUE(a.count(name)) << name;
    EXPECT_EQ(a.at(name).to_vector<float>(), t.to_vector<float>()) << name;
    mtp += name.find(".eh_proj.") != std::string::npos;
  }
  EXPECT_EQ(mtp, 2);  // both depths' weights are in the checkpoint
}

TEST(MtpTrain, AResumeIsBitwise) {
  const std::string full = fresh_dir("mtp_full"), part = fresh_dir("mtp_part");
  train(mtp_run({"--save", full}, 4));
  train(mtp_run({"--save", part}, 2));
  train(mtp_run({"--save", part, "--load", part}, 4));
  expect_bitwise(weights_of(part), weights_of(full));
  EXPECT_EQ(models::load_config(full + "/iter_0000004/config.json").num_nextn_predict_layers, 2);
}

// `tidal export` keeps the depths and writes DeepSeek's copies of the embedding and head into each; resuming without
// --mtp-num-layers is refused by name.
TEST(MtpTrain, AnExportKeepsTheDepths) {
  const std::string save = fresh_dir("mtp_export"), out = save + "/hf";
  train(mtp_run({"--save", save}, 2));
  const testing::CommandResult r = testing::run_command(kTidal + " export --load " + save + " --output " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::map<std::string, Tensor> exported = io::load_safetensors(out + "/model.safetensors").tensors;
  const std::map<std::string, Tensor> trained = weights_of(save);
  EXPECT_EQ(exported.size(), trained.size() + 4);  // + embed_tokens and shared_head.head in layers 3 and 4
  for (const auto& [name, t] : trained) EXPECT_EQ(exported.at(name).to_vector<float>(), t.to_vector<float>()) << name;
  EXPECT_EQ(exported.at("model.layers.4.shared_head.head.weight").to_vector<float>(),
            trained.at("lm_head.weight").to_vector<float>());
  EXPECT_EQ(models::load_config(out + "/config.json").num_nextn_predict_layers, 2);
  const std::string resumed = testing::error_of([&] {
    std::vector<std::string> flags = mtp_run({"--load", save}, 3);
    const auto depths = std::find(flags.begin(), flags.end(), "--mtp-num-layers");
    flags.erase(depths, depths + 2);  // the flag and its value
    train(flags);
  });
  EXPECT_NE(
      resumed.find("holds 2 multi-token-prediction depths and this run builds 0: resume it with --mtp-num-layers 2"),
      std::string::npos)
      << resumed;
}

TEST(MtpTrain, MemoryFeaturesTrainTheSameModel) {
  const std::string plain = fresh_dir("mtp_plain");
  train(mtp_run({"--save", plain}));
  const auto want = weights_of(plain);
  std::vector<std::vector<std::string>> features = kBitwiseMemoryFeatures;
  features.push_back({"--recompute-modules", "mla_up_proj,moe"});
  for_each_feature(features, [&](const std::vector<std::string>& f) {
    const std::string dir = fresh_dir("mtp_feature");
    train(mtp_run(with(f, {"--save", dir})));
    expect_bitwise(weights_of(dir), want);
  });
}

TEST(MtpTrain, TheDepthsLossesAreLogged) {
  const std::string dir = fresh_dir("mtp_log");
  std::string cmd = kTidal + " train";
  for (const std::string& f : mtp_run({"--log-interval", "1", "--metrics-json", dir + "/m.json"}, 2)) cmd += " " + f;
  const testing::CommandResult r = testing::run_command("OMP_WAIT_POLICY=passive " + cmd);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("multi-token prediction: 2 depths (model.layers.3-4)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" | mtp_1 loss: "), std::string::npos);
  EXPECT_NE(r.output.find(" | mtp_2 loss: "), std::string::npos);
  const nlohmann::json m = nlohmann::json::parse(std::ifstream(dir + "/m.json"));
  ASSERT_EQ(m["steps"].size(), 2u);
  for (const auto& step : m["steps"]) {
    ASSERT_EQ(step["mtp_losses"].size(), 2u);
    // Random weights over a vocabulary of 512: each depth's loss near ln(512), as the main loss.
    for (const auto& l : step["mtp_losses"]) EXPECT_NEAR(l.get<double>(), step["loss"].get<double>(), 0.5);
  }
}

TEST(MtpTrain, WhatItCannotDoIsRefusedByName) {
  EXPECT_NE(message({"--model", "tiny-deepseek-v3", "--mock-data", "--mtp-loss-scaling-factor", "0.2"})
                .find("--mtp-loss-scaling-factor needs --mtp-num-layers"),
            std::string::npos);
  EXPECT_NE(message(mtp_run({"--reset-attention-mask"})).find("--mtp-num-layers with --reset-position-ids"),
            std::string::npos);
  EXPECT_NE(message({"--model", "tiny-deepseek-v3", "--mock-data", "--mtp-num-layers", "65"}).find("mtp-num-layers"),
            std::string::npos);
  // A family without MTP modules: refused when the model is built.
  std::string cmd = kTidal + " train --model tiny-llama --mock-data --train-iters 1 --mtp-num-layers 1";
  const testing::CommandResult r = testing::run_command(cmd);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.output.find("is built for deepseek_v3"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace tidal::train
