#pragma once
// Shared by the `tidal train` tests: fresh directories, a quiet run of the trainer, the tiny run.
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/error_of.h"
#include "tidal/plan/training.h"
#include "tidal/train/arguments.h"

namespace tidal::train {

inline std::string fresh_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "tidal_train_" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d;
}

inline TrainResult train(std::vector<std::string> flags) {
  flags.push_back("--no-progress");
  std::FILE* quiet = std::fopen("/dev/null", "w");
  TrainResult r = plan::run_training(parse_train_args(flags), quiet);  // as `tidal train` runs it
  std::fclose(quiet);
  return r;
}

// tiny-gpt2 on mock data (vocabulary 512), 2 x 32 tokens per micro-batch, two micro-batches per
// step, dropout on: every piece of training state matters.
inline const std::vector<std::string> kTiny = {
    "--model", "tiny-gpt2",           "--mock-data", "--seq-length",   "32",   "--micro-batch-size",
    "2",       "--global-batch-size", "4",           "--lr",           "3e-3", "--hidden-dropout",
    "0.1",     "--attention-dropout", "0.1",         "--log-interval", "100"};

inline std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

// The flags as one line, for a trace.
inline std::string joined(const std::vector<std::string>& flags) {
  std::string s;
  for (const std::string& f : flags) s += (s.empty() ? "" : " ") + f;
  return s;
}

// `model` on mock data: micro-batches of 2 x 32 tokens, `global` samples a step, `iters` steps at the constant
// learning rate `lr`, no evaluation.
inline std::vector<std::string> constant_lr_run(const std::string& model, int64_t global, const std::string& lr,
                                                int64_t iters, const std::vector<std::string>& more) {
  return with({"--model", model, "--mock-data", "--seq-length", "32", "--micro-batch-size", "2", "--global-batch-size",
               std::to_string(global), "--train-iters", std::to_string(iters), "--lr", lr, "--lr-warmup-iters", "0",
               "--lr-decay-style", "constant", "--eval-interval", "0"},
              more);
}

// Memory features that change where bytes live but not one bit of the training: full recompute, the activation and
// norm recomputes, activation offload, the swap optimizer (tests add their family's selective modules).
inline const std::vector<std::vector<std::string>> kBitwiseMemoryFeatures = {
    {"--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"},
    {"--recompute-activation-function", "--recompute-norm"},
    {"--activation-offload"},
    {"--swap-optimizer"}};

// Calls `run(f)` for each of `features` under a trace naming its flags.
inline void for_each_feature(const std::vector<std::vector<std::string>>& features,
                             const std::function<void(const std::vector<std::string>&)>& run) {
  for (const std::vector<std::string>& f : features) {
    std::string name;
    for (const std::string& s : f) name += (name.empty() ? "" : " ") + s;
    SCOPED_TRACE(name);
    run(f);
  }
}

// What parse_train_args says about `flags`: its error message, or "no error".
inline std::string message(const std::vector<std::string>& flags) {
  return testing::error_of([&] { parse_train_args(flags); });
}

}  // namespace tidal::train
