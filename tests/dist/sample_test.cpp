// --sample-prompt after distributed training: every rank generates, each token rank 0's, so under
// expert parallelism (each forward an all-to-all over the expert-parallel group) every rank runs the
// same forwards and returns the same text (models::SampleOptions::agree).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "tests/dist/train_runs.h"
#include "tidal/dist/collectives.h"
#include "tidal/train/builtin_corpus.h"

namespace tidal::train {
namespace {

TEST(DistSample, EveryRankTakesRankZerosTokensUnderExpertParallel) {
  dist::Communicator& world = dist::world();
  if (world.size() % 2 != 0) GTEST_SKIP() << world.size() << " ranks";
  // A corpus with a tokenizer (a sample needs one), prepared by rank 0 for every rank.
  const std::string dir = scratch_dir("sample_corpus", world.size());
  PreparedCorpus corpus;
  if (world.rank() == 0) corpus = prepare_builtin_corpus(512, dir);
  world.barrier();
  if (world.rank() != 0) corpus = prepare_builtin_corpus(512, dir);  // found in the cache now
  const TrainArgs args = parse_train_args({"--model",
                                           "tiny-qwen3-moe",
                                           "--data-path",
                                           corpus.data_prefix,
                                           "--tokenizer",
                                           corpus.tokenizer_path,
                                           "--seq-length",
                                           "16",
                                           "--micro-batch-size",
                                           "2",
                                           "--global-batch-size",
                                           std::to_string(2 * world.size()),
                                           "--train-iters",
                                           "2",
                                           "--eval-interval",
                                           "0",
                                           "--expert-model-parallel-size",
                                           "2",
                                           "--sample-prompt",
                                           "The",
                                           "--sample-tokens",
                                           "12",
                                           "--no-progress"});
  std::FILE* quiet = std::fopen("/dev/null", "w");
  const TrainResult r = run_training(args, quiet, world);
  std::fclose(quiet);
  ASSERT_FALSE(r.sample.empty());
  EXPECT_EQ(r.sample.rfind("The", 0), 0u) << r.sample;
  const std::vector<std::string> all = dist::all_gather_strings(world, r.sample);
  for (size_t k = 1; k < all.size(); ++k) EXPECT_EQ(all[k], all[0]) << "rank " << k;
}

}  // namespace
}  // namespace tidal::train
