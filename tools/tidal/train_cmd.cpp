// `tidal train`: see docs/training.md. Without arguments it trains small-gpt2 on the built-in corpus.
#include <cstdio>

#include "tidal/plan/training.h"
#include "tidal/train/arguments.h"
#include "tools/tidal/cli.h"

namespace tidal::cli {

int run_train(const std::vector<std::string>& argv) {
  for (const std::string& a : argv)
    if (a == "--help" || a == "-h") {
      std::printf("usage: tidal train [options]   (no options: small-gpt2 on the built-in corpus)\n\n%s",
                  train::train_flags().help().c_str());
      return kOk;
    }
  const train::TrainArgs args = train::parse_train_args(argv);
  plan::run_training(args, stdout);
  return kOk;
}

}  // namespace tidal::cli
