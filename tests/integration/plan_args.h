#pragma once
// The run the planner's tests plan: small-gpt2 on mock tokens, 4 x 128 tokens a micro-batch, 8 a step.
#include <string>
#include <vector>

#include "tidal/train/arguments.h"

namespace tidal::test {

inline train::TrainArgs small_gpt2_plan_args(std::vector<std::string> extra) {
  std::vector<std::string> argv = {
      "--model", "small-gpt2",          "--mock-data", "--seq-length",  "128", "--micro-batch-size",
      "4",       "--global-batch-size", "8",           "--train-iters", "2"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return train::parse_train_args(argv);
}

}  // namespace tidal::test
