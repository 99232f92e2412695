#pragma once
// Shared by the `tidal train` tests: fresh directories, a quiet run of the trainer, the tiny run.
#include <cstdio>
#include <filesystem>
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

// What parse_train_args says about `flags`: its error message, or "no error".
inline std::string message(const std::vector<std::string>& flags) {
  return testing::error_of([&] { parse_train_args(flags); });
}

}  // namespace tidal::train
