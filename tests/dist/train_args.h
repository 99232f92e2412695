#pragma once
// The tests' training runs: tiny models on mock data, no dropout, no evaluation, --save every 2 steps.
#include <string>
#include <vector>

#include "tidal/train/arguments.h"

namespace tidal::train {

inline TrainArgs args_for(int64_t micro, int64_t global, const std::string& save, const std::string& model = "tiny-gpt2",
                   const std::vector<std::string>& extra = {}, int64_t iters = 4) {
  std::vector<std::string> argv = {"--model",
                                   model,
                                   "--mock-data",
                                   "--train-iters",
                                   std::to_string(iters),
                                   "--seq-length",
                                   "16",
                                   "--micro-batch-size",
                                   std::to_string(micro),
                                   "--global-batch-size",
                                   std::to_string(global),
                                   "--attention-dropout",
                                   "0",
                                   "--hidden-dropout",
                                   "0",
                                   "--eval-interval",
                                   "0"};
  if (!save.empty()) argv.insert(argv.end(), {"--save", save, "--save-interval", "2"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  return parse_train_args(argv);
}

}  // namespace tidal::train
