// The data-parallel streams on one rank (no mpirun): the overlapped gradient reduction on the "comm"
// stream and ZeRO-3's prefetches on the "gather" stream run on their worker threads while backward
// and forward run here. One rank exchanges nothing, but every other step of theirs — gradients freed
// and summed into the shard from the comm thread, parameter bytes allocated and freed around the
// layers — runs as on N ranks; the scripts/test.sh TSan pass runs this test (docs/distributed.md).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tidal/train/trainer.h"

namespace tidal::parallel {
namespace {

train::TrainResult train_quietly(std::vector<std::string> extra) {
  std::vector<std::string> argv = {"--model",
                                   "tiny-llama",
                                   "--mock-data",
                                   "--seq-length",
                                   "16",
                                   "--micro-batch-size",
                                   "2",
                                   "--global-batch-size",
                                   "4",
                                   "--train-iters",
                                   "3",
                                   "--eval-interval",
                                   "0",
                                   "--no-progress",
                                   "--hidden-dropout",
                                   "0",
                                   "--attention-dropout",
                                   "0"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::FILE* quiet = std::fopen("/dev/null", "w");
  train::TrainResult r = train::run_training(train::parse_train_args(argv), quiet);
  std::fclose(quiet);
  return r;
}

// --bf16 too: the f32 sums become gradients on this thread while the comm thread reduces the
// buckets already complete (train/main_grads.h).
TEST(DataParallelStreams, OverlappedReductionAndPrefetchOnOneRankAreBitwisePlain) {
  for (const std::vector<std::string>& precision : {std::vector<std::string>{}, std::vector<std::string>{"--bf16"}}) {
    const train::TrainResult plain = train_quietly(precision);
    for (std::vector<std::string> flags :
         {std::vector<std::string>{"--overlap-grad-reduce", "--ddp-bucket-size", "10000"},
          std::vector<std::string>{"--data-parallel-sharding-strategy", "optim_grads_params", "--overlap-param-gather",
                                   "--overlap-grad-reduce", "--ddp-bucket-size", "10000"}}) {
      flags.insert(flags.end(), precision.begin(), precision.end());
      const train::TrainResult r = train_quietly(flags);
      ASSERT_EQ(r.losses.size(), plain.losses.size());
      for (size_t i = 0; i < r.losses.size(); ++i)
        EXPECT_EQ(r.losses[i], plain.losses[i]) << flags[0] << " " << flags.back() << " step " << i;
    }
  }
}

}  // namespace
}  // namespace tidal::parallel
