// `tidal train --bf16` (train/precision.h): every tiny preset learns and follows the f32 run's losses
// within bf16's tolerance; the allocator's bytes per category are the mixed-precision formula; the
// f32 master weights and states resume bit for bit; the checkpoint holds bf16 weights and says so;
// the memory features run in bf16 (bit for bit the plain bf16 run where the f32 run has that
// guarantee); unsupported combinations are errors naming the flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/integration/train_helpers.h"
#include "tidal/base/error.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/tokenizer.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/memory/savings.h"
#include "tidal/models/causal_lm.h"

namespace tidal::train {
namespace {

// A corpus with something to learn (mock data is uniform: nothing to learn): short sentences from a
// few words, tokenized by a byte-level BPE trained on them. Returns the flags that train on it.
std::vector<std::string> learnable_data(const std::string& name) {
  const std::string dir = fresh_dir(name);
  const std::vector<std::string> words = {"the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to"};
  std::vector<std::string> docs;
  for (int d = 0; d < 400; ++d) {
    std::string s;
    for (int w = 0; w < 12; ++w) s += words[size_t((d * 7 + w * w * 3 + w) % 10)] + (w % 4 == 3 ? ". " : " ");
    docs.push_back(s);
  }
  data::TrainOptions opt;
  opt.vocab_size = 320;
  const data::Tokenizer tok = data::Tokenizer::train(docs, opt);
  tok.save(dir + "/tokenizer.json");
  data::IndexedDatasetWriter w(dir + "/words", data::optimal_token_dtype(tok.vocab_size()));
  for (const std::string& s : docs) {
    std::vector<int64_t> ids = tok.encode(s);
    ids.push_back(tok.eod_id());
    w.add_document(ids);
  }
  w.finish();
  return {"--data-path",
          dir + "/words",
          "--tokenizer",
          dir + "/tokenizer.json",
          "--split",
          "100,0,0",
          "--seq-length",
          "32",
          "--micro-batch-size",
          "4",
          "--global-batch-size",
          "8",
          "--lr",
          "3e-3",
          "--lr-warmup-iters",
          "0",
          "--log-interval",
          "100",
          "--eval-interval",
          "0"};
}

nlohmann::json summary(const std::string& path) { return nlohmann::json::parse(io::read_file(path))["summary"]; }

}  // namespace

// Note [bf16 loss tolerance]: bf16 keeps 8 significant bits, a relative rounding error of at most
// u = 2^-9 (0.2%) per stored value. The loss is computed in f32 from bf16 logits, so its first value
// differs from the f32 run's by about u times the logits' size averaged over the tokens (1e-4 here);
// the runs then drift apart through the bf16 weights the steps see (the f32 master keeps the updates
// themselves). Over these 12 steps 1% of the loss (5 u) bounds the gap with room (measured: at most
// 0.1%, printed) and is the issue's own bar for bf16 against f32 (validation losses within 1%).
TEST(TrainBf16, EveryTinyPresetLearnsAndFollowsTheF32Run) {
  const std::vector<std::string> data = learnable_data("bf16_learn");
  for (const char* preset : {"tiny-gpt2", "tiny-llama", "tiny-qwen3-moe"}) {
    const std::vector<std::string> flags = with(data, {"--model", preset, "--train-iters", "12"});
    const TrainResult f32 = train(flags);
    const TrainResult bf16 = train(with(flags, {"--bf16"}));
    ASSERT_EQ(bf16.losses.size(), 12u) << preset;
    EXPECT_LT(bf16.losses.back(), bf16.losses.front() - 1.0) << preset;  // it learns
    double gap = 0;                                                      // the largest relative difference, printed
    for (size_t i = 0; i < 12; ++i) {
      EXPECT_NEAR(bf16.losses[i], f32.losses[i], 0.01 * f32.losses[i]) << preset << " iteration " << i + 1;
      gap = std::max(gap, std::abs(bf16.losses[i] - f32.losses[i]) / f32.losses[i]);
    }
    std::printf("%s: bf16 loss %.4f -> %.4f, f32 %.4f -> %.4f, largest relative gap %.2e\n", preset,
                bf16.losses.front(), bf16.losses.back(), f32.losses.front(), f32.losses.back(), gap);
    EXPECT_NE(bf16.losses, f32.losses) << preset;  // it did train in bf16
  }
}

// Per parameter element: 2 bytes of bf16 weight, 4 of f32 gradient sum, 4 of f32 master and 8 of
// f32 AdamW states, the 18 bytes of mixed precision. The gradient category peaks at one parameter's
// bf16 gradient above its 4 bytes (train/main_grads.h); an f32 run's is 4 + 4 + 8.
TEST(TrainBf16, AllocatorBytesPerCategoryAreTheMixedPrecisionFormula) {
  const std::string dir = fresh_dir("bf16_memory");
  nn::Init init;
  init.device = Device::meta();
  int64_t P = 0, largest = 0;
  for (const Tensor& p : models::create_model(models::preset("tiny-gpt2"), init)->parameters()) {
    P += p.numel();
    largest = std::max(largest, p.numel());
  }
  for (const bool bf16 : {false, true}) {
    const std::string path = dir + (bf16 ? "/bf16.json" : "/f32.json");
    std::vector<std::string> flags = with(kTiny, {"--train-iters", "2", "--metrics-json", path});
    if (bf16) flags.push_back("--bf16");
    train(flags);
    const nlohmann::json peak = summary(path)["peak_bytes_by_category"];
    EXPECT_EQ(peak["parameter"].get<int64_t>(), (bf16 ? 2 : 4) * P) << bf16;
    EXPECT_EQ(peak["gradient"].get<int64_t>(), bf16 ? 4 * P + 2 * largest : 4 * P) << bf16;
    EXPECT_EQ(peak["optimizer_state"].get<int64_t>(), (bf16 ? 12 : 8) * P) << bf16;
    if (bf16) {
      EXPECT_EQ(peak["parameter"].get<int64_t>() + peak["optimizer_state"].get<int64_t>() + 4 * P, 18 * P);
      // Saved activations are bf16; only per-row statistics (norms' and attention's, the loss's
      // log-sum-exp: at most batch x tokens x heads = 256 values) stay f32.
      int64_t saved_bf16 = 0;
      const nlohmann::json saved = summary(path)["saved_tensors"];
      for (const nlohmann::json& t : saved) {
        const std::string dtype = t["dtype"];
        if (dtype == "bf16") ++saved_bf16;
        if (dtype == "f32") {
          EXPECT_LE(t["bytes"].get<int64_t>(), 4 * 256) << t.dump();
        }
        EXPECT_NE(dtype, "f64") << t.dump();
      }
      EXPECT_GT(saved_bf16, 10);
      EXPECT_EQ(nlohmann::json::parse(io::read_file(path))["config"]["bf16"], true);
    }
  }
}

// --swap-optimizer swaps the f32 master with the moments: 12 bytes per parameter element in host
// memory, two windows of them on the device (memory/savings.h knows a bf16 parameter's master).
TEST(TrainBf16, TheSwapOptimizerSwapsMasterAndMoments) {
  const std::string path = fresh_dir("bf16_swap") + "/metrics.json";
  train(with(kTiny, {"--bf16", "--train-iters", "2", "--swap-optimizer", "--swap-optimizer-times", "6",
                     "--metrics-json", path}));
  nn::Init init;
  init.device = Device::meta();
  init.dtype = DType::bf16;
  std::vector<memory::SwapParam> params;
  int64_t P = 0;
  for (const Tensor& p : models::create_model(models::preset("tiny-gpt2"), init)->parameters()) {
    params.push_back({p.numel(), p.dtype()});
    P += p.numel();
  }
  const nlohmann::json s = summary(path);
  EXPECT_EQ(s["peak_bytes_by_category"]["host_offload"].get<int64_t>(), 12 * P);
  EXPECT_EQ(s["swap_optimizer"]["host_state_bytes"].get<int64_t>(), 12 * P);
  EXPECT_EQ(s["peak_bytes_by_category"]["optimizer_state"].get<int64_t>(),
            memory::swap_optimizer_device_bytes(params, 6));
  EXPECT_EQ(s["peak_bytes_by_category"]["parameter"].get<int64_t>(), 2 * P);
}

TEST(TrainBf16, MasterWeightsAndStatesResumeBitwiseAndTheCheckpointHoldsBf16) {
  const std::string dir = fresh_dir("bf16_resume");
  const std::vector<std::string> run = with(kTiny, {"--bf16", "--train-iters", "4", "--lr-decay-iters", "4"});
  const TrainResult full = train(run);
  train(with(run, {"--save", dir, "--save-interval", "2"}));
  std::ofstream(dir + "/latest_checkpointed_iteration.txt") << "2\n";
  const TrainResult resumed = train(with(run, {"--load", dir}));
  ASSERT_EQ(resumed.losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(resumed.losses[i], full.losses[2 + i]) << "iteration " << 3 + i;

  const std::string ck = dir + "/iter_0000002";
  for (const auto& [name, t] : io::load_safetensors(ck + "/model.safetensors").tensors)
    EXPECT_EQ(t.dtype(), DType::bf16) << name;
  int64_t masters = 0;
  for (const auto& [name, t] : io::load_safetensors(ck + "/optimizer.safetensors").tensors)
    if (name.ends_with(".master") || name.ends_with(".exp_avg") || name.ends_with(".exp_avg_sq")) {
      EXPECT_EQ(t.dtype(), DType::f32) << name;
      masters += name.ends_with(".master");
    }
  EXPECT_GT(masters, 0);
  EXPECT_EQ(nlohmann::json::parse(io::read_file(ck + "/config.json"))["torch_dtype"], "bfloat16");

  // The precision must match the checkpoint's, both ways.
  std::string e = testing::error_of([&] { train(with(kTiny, {"--train-iters", "4", "--load", dir})); });
  EXPECT_NE(e.find("field 'torch_dtype' says bfloat16, this run trains in float32: give --bf16"), std::string::npos)
      << e;
  const std::string f32_dir = fresh_dir("bf16_resume_f32");
  train(with(kTiny, {"--train-iters", "1", "--save", f32_dir}));
  e = testing::error_of([&] { train(with(run, {"--load", f32_dir})); });
  EXPECT_NE(e.find("says float32, this run trains in bfloat16: drop --bf16"), std::string::npos) << e;
}

// Offload, recompute and the swapped optimizer leave the arithmetic alone in bf16 as in f32. The
// chunked loss computes the logits in f32 (ops/chunked_loss.h) where the plain bf16 run rounds them
// to bf16: the same losses within bf16's tolerance (Note [bf16 loss tolerance]).
TEST(TrainBf16, MemoryFeaturesRunInBf16) {
  const std::vector<std::string> run = with(kTiny, {"--bf16", "--train-iters", "3"});
  const TrainResult plain = train(run);
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{"--activation-offload"},
        std::vector<std::string>{"--swap-optimizer", "--swap-optimizer-times", "4"},
        std::vector<std::string>{"--recompute-granularity", "full", "--recompute-method", "uniform",
                                 "--recompute-num-layers", "1"},
        std::vector<std::string>{"--recompute-granularity", "selective"},
        std::vector<std::string>{"--activation-offload", "--offload-policy", "layer-input", "--recompute-granularity",
                                 "full", "--recompute-method", "uniform", "--recompute-num-layers", "1",
                                 "--swap-optimizer"}})
    EXPECT_EQ(train(with(run, extra)).losses, plain.losses) << extra[0];
  const TrainResult chunked = train(with(run, {"--loss-compute-mode", "chunk", "--loss-chunk-size", "16"}));
  ASSERT_EQ(chunked.losses.size(), plain.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i)
    EXPECT_NEAR(chunked.losses[i], plain.losses[i], 0.01 * plain.losses[i]) << "iteration " << i + 1;
}

TEST(TrainBf16, CombinesWithEveryDataParallelFlag) {
  // The distributed optimizer takes bf16 parameters with f32 gradient sums, and an overlapped
  // reduction reads the sums as they complete (tests/dist: bit for bit).
  EXPECT_EQ(message({"--bf16", "--use-distributed-optimizer"}), "no error");
  EXPECT_EQ(message({"--bf16", "--data-parallel-sharding-strategy", "optim_grads_params"}), "no error");
  EXPECT_EQ(message({"--bf16", "--overlap-grad-reduce"}), "no error");
  EXPECT_EQ(message({"--bf16", "--overlap-grad-reduce", "--data-parallel-sharding-strategy", "optim_grads_params",
                     "--overlap-param-gather"}),
            "no error");
  EXPECT_EQ(message({"--bf16"}), "no error");
  EXPECT_EQ(parse_train_args({"--bf16"}).model.torch_dtype, "bfloat16");
  EXPECT_EQ(parse_train_args({}).model.torch_dtype, "float32");
}

}  // namespace tidal::train
