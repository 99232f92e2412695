// `tidal train` with --loss-compute-mode chunk and --swap-optimizer: the same losses as the default
// run, the logits and optimizer-state peaks the formulas predict, checkpoints that resume exactly in
// either direction, and flag errors that say what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/integration/train_helpers.h"
#include "tests/support/error_of.h"
#include "tidal/base/error.h"
#include "tidal/io/atomic_file.h"
#include "tidal/memory/savings.h"
#include "tidal/models/causal_lm.h"

namespace tidal::train {
namespace {

// With evaluation: the validation loss goes through the loss compute mode too.
const std::vector<std::string> kRun = with(kTiny, {"--eval-interval", "3", "--eval-iters", "2"});

nlohmann::json summary(const std::string& path) { return nlohmann::json::parse(io::read_file(path))["summary"]; }

}  // namespace

TEST(TrainSavings, ChunkedLossGivesTheSameLossesWithOneChunkOfLogits) {
  const std::string dir = fresh_dir("savings_chunk");
  const TrainResult plain = train(with(kRun, {"--train-iters", "3", "--metrics-json", dir + "/plain.json"}));
  // One chunk covering the 64 tokens: the same GEMM calls, bitwise the same run.
  const TrainResult whole =
      train(with(kRun, {"--train-iters", "3", "--loss-compute-mode", "chunk", "--loss-chunk-size", "64"}));
  EXPECT_EQ(whole.losses, plain.losses);
  EXPECT_EQ(whole.final_val_loss, plain.final_val_loss);
  // Chunks of 16 tokens: the same numbers up to the order of additions (1e-6 relative per step).
  const TrainResult chunked = train(with(kRun, {"--train-iters", "3", "--loss-compute-mode", "chunk",
                                                "--loss-chunk-size", "16", "--metrics-json", dir + "/chunk.json"}));
  ASSERT_EQ(chunked.losses.size(), plain.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i)
    EXPECT_NEAR(chunked.losses[i], plain.losses[i], 1e-5 * plain.losses[i]);
  EXPECT_NEAR(chunked.final_val_loss, plain.final_val_loss, 1e-5 * plain.final_val_loss);
  const int64_t V = 512;
  EXPECT_EQ(summary(dir + "/plain.json")["peak_bytes_by_category"]["logits"].get<int64_t>(),
            memory::chunked_loss_logits_bytes(2, 32, V, 0));
  EXPECT_EQ(summary(dir + "/chunk.json")["peak_bytes_by_category"]["logits"].get<int64_t>(),
            memory::chunked_loss_logits_bytes(2, 32, V, 16));
  EXPECT_EQ(nlohmann::json::parse(io::read_file(dir + "/chunk.json"))["config"]["loss_compute_mode"], "chunk");
}

TEST(TrainSavings, SwapOptimizerIsBitwiseAndKeepsTwoWindowsOnTheDevice) {
  const std::string dir = fresh_dir("savings_swap");
  const TrainResult plain = train(with(kRun, {"--train-iters", "4", "--metrics-json", dir + "/plain.json"}));
  const TrainResult swapped = train(with(kRun, {"--train-iters", "4", "--swap-optimizer", "--swap-optimizer-times", "6",
                                                "--metrics-json", dir + "/swap.json"}));
  EXPECT_EQ(swapped.losses, plain.losses);
  EXPECT_EQ(swapped.final_val_loss, plain.final_val_loss);

  nn::Init init;
  init.device = Device::meta();
  auto model = models::create_model(models::preset("tiny-gpt2"), init);
  std::vector<memory::SwapParam> params;
  int64_t state = 0;
  for (const auto& [name, p] : model->named_parameters()) {
    params.push_back({p.numel(), p.dtype()});
    state += p.numel() * 8;
  }
  const nlohmann::json s = summary(dir + "/swap.json"), p = summary(dir + "/plain.json");
  EXPECT_EQ(p["peak_bytes_by_category"]["optimizer_state"].get<int64_t>(), state);
  EXPECT_EQ(s["peak_bytes_by_category"]["optimizer_state"].get<int64_t>(),
            memory::swap_optimizer_device_bytes(params, 6));
  EXPECT_EQ(s["peak_bytes_by_category"]["host_offload"].get<int64_t>(), state);
  const nlohmann::json& so = s["swap_optimizer"];
  EXPECT_EQ(so["windows"], 6);
  EXPECT_EQ(so["device_peak_bytes"].get<int64_t>(), memory::swap_optimizer_device_bytes(params, 6));
  EXPECT_EQ(so["host_state_bytes"].get<int64_t>(), state);
  EXPECT_EQ(so["bytes_to_device"].get<int64_t>(), 4 * state);  // every state in and out at each of 4 steps
  EXPECT_EQ(so["bytes_to_host"].get<int64_t>(), 4 * state);
  EXPECT_EQ(so["steps"], 4);
}

TEST(TrainSavings, SwappedCheckpointsResumeBitwiseEitherWay) {
  const std::string dir = fresh_dir("savings_resume");
  const std::vector<std::string> swap = {"--swap-optimizer", "--swap-optimizer-times", "5"};
  const std::vector<std::string> common = {"--train-iters", "8", "--lr-decay-iters", "8"};
  const TrainResult full = train(with(with(kRun, common), swap));
  train(with(with(with(kRun, common), swap), {"--save", dir, "--save-interval", "4"}));
  std::ofstream(dir + "/latest_checkpointed_iteration.txt") << "4\n";
  // A swapped checkpoint resumed swapped (other K), and resumed in device memory.
  for (const std::vector<std::string>& how :
       {std::vector<std::string>{"--swap-optimizer", "--swap-optimizer-times", "3"}, std::vector<std::string>{}}) {
    const TrainResult resumed = train(with(with(with(kRun, common), how), {"--load", dir}));
    ASSERT_EQ(resumed.losses.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(resumed.losses[i], full.losses[4 + i]) << "iteration " << 5 + i;
  }
  // The full run swapped equals the full run in device memory, so this also covers device -> swapped.
  EXPECT_EQ(train(with(kRun, common)).losses, full.losses);
}

// The whole triage order at once: one chunk of loss covering the tokens (the same GEMMs), offload of
// every block, full recompute and the swapped optimizer each leave the arithmetic alone, so together
// they still give bitwise the losses of the plain run.
TEST(TrainSavings, ChunkedLossSwapOptimizerOffloadAndRecomputeComposeBitwise) {
  const std::vector<std::string> steps = {"--train-iters", "3"};
  const TrainResult plain = train(with(kRun, steps));
  ASSERT_EQ(plain.losses.size(), 3u);
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--activation-offload", "--swap-optimizer", "--swap-optimizer-times", "4"},
        std::vector<std::string>{"--loss-compute-mode", "chunk", "--loss-chunk-size", "64", "--activation-offload",
                                 "--offload-policy", "layer-input", "--recompute-granularity", "full",
                                 "--recompute-method", "uniform", "--recompute-num-layers", "1", "--swap-optimizer"}}) {
    const TrainResult all = train(with(with(kRun, steps), extra));
    EXPECT_EQ(all.losses, plain.losses) << extra[0];
    EXPECT_EQ(all.final_val_loss, plain.final_val_loss) << extra[0];
  }
}

TEST(TrainSavings, BadFlagCombinationsAreRejected) {
  EXPECT_NE(message({"--loss-chunk-size", "512"}).find("--loss-chunk-size needs --loss-compute-mode chunk"),
            std::string::npos);
  EXPECT_NE(message({"--loss-compute-mode", "chunked"}).find("must be default or chunk"), std::string::npos);
  EXPECT_NE(message({"--loss-compute-mode", "chunk", "--loss-chunk-size", "0"}).find("must be >= 1"),
            std::string::npos);
  EXPECT_NE(message({"--swap-optimizer-times", "4"}).find("--swap-optimizer-times needs --swap-optimizer"),
            std::string::npos);
  EXPECT_NE(message({"--swap-optimizer", "--swap-optimizer-times", "0"}).find("must be >= 1"), std::string::npos);
  EXPECT_NE(testing::error_of([] {
              train(with(kTiny, {"--train-iters", "1", "--swap-optimizer", "--swap-optimizer-times", "1000"}));
            }).find("--swap-optimizer-times 1000 exceeds the model's"),
            std::string::npos);
  EXPECT_EQ(message({"--loss-compute-mode", "chunk", "--swap-optimizer"}), "no error");
}

}  // namespace tidal::train
