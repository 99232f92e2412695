// --context-parallel-size: parsed once into ContextParallelConfig, and a --seq-length it
// cannot split refused with the numbers and flags involved.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/error_of.h"
#include "tidal/parallel/context.h"
#include "tidal/train/arguments.h"

namespace tidal::parallel {
namespace {

using testing::error_of;

std::vector<std::string> cp_args(std::vector<std::string> more) {
  std::vector<std::string> a = {"--model", "tiny-llama", "--mock-data", "--seq-length", "24"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

TEST(ContextParallelArgs, ParsesTheSize) {
  EXPECT_EQ(train::parse_train_args(cp_args({})).parallel.context, 1);
  const train::TrainArgs a = train::parse_train_args(cp_args({"--context-parallel-size", "3"}));
  EXPECT_EQ(a.parallel.context, 3);
  EXPECT_EQ(a.to_json()["context_parallel_size"], 3);
  EXPECT_NE(error_of([] { train::parse_train_args(cp_args({"--context-parallel-size", "0"})); }), "no error");
}

TEST(ContextParallelArgs, TwiceTheSizeMustDivideTheSequence) {
  EXPECT_EQ(error_of([] {
              train::parse_train_args(cp_args({"--context-parallel-size", "5"}));
            }),
            "tidal train: --seq-length 24 is not a multiple of 2 x --context-parallel-size 5 = 10: each rank holds "
            "two equal chunks of every sequence");
}

TEST(ContextParallelArgs, RunsEveryAttentionKernelDropoutAndMoe) {
  const auto refused = [](std::vector<std::string> more) {
    more.insert(more.begin(), {"--context-parallel-size", "2"});
    return error_of([&] { train::parse_train_args(cp_args(more)); });
  };
  // Eager gathers K/V over the CP group (context_gather_attention_test, context_parallel_eager_test).
  EXPECT_EQ(refused({"--attention", "eager"}), "no error");
  EXPECT_EQ(refused({"--attention", "eager", "--recompute-granularity", "selective"}), "no error");
  // Dropout runs: ring attention and the hidden dropout draw one process's masks (context_parallel_train_test).
  EXPECT_EQ(refused({"--attention-dropout", "0.1", "--hidden-dropout", "0.1"}), "no error");
  // Mixture-of-experts models run, with expert parallelism too (context_parallel_train_test).
  EXPECT_EQ(error_of([] {
              train::parse_train_args(
                  {"--model", "tiny-qwen3-moe", "--mock-data", "--seq-length", "24", "--context-parallel-size", "2"});
            }),
            "no error");
  EXPECT_EQ(refused({"--auto-memory"}), "no error");  // tidal plan plans it (docs/planning.md)
}

// The distributed optimizer shards over all DP x CP ranks (tests/dist/context_parallel_train_test.cpp).
TEST(ContextParallelArgs, RunsWithEveryShardingStrategyAndOverlap) {
  for (const std::string strategy : {"optim", "optim_grads", "optim_grads_params"}) {
    const train::TrainArgs a = train::parse_train_args(cp_args(
        {"--context-parallel-size", "2", "--data-parallel-sharding-strategy", strategy, "--overlap-grad-reduce"}));
    EXPECT_EQ(a.parallel.context, 2);
    EXPECT_TRUE(a.parallel.overlap_grad_reduce);
  }
  EXPECT_EQ(train::parse_train_args(cp_args({"--context-parallel-size", "2", "--use-distributed-optimizer"}))
                .parallel.sharding,
            ShardingStrategy::optim);
}

TEST(ContextParallelArgs, LocalTokensAreTheRanksTwoChunks) {
  // 1 sample of 8 tokens + 1 label; C = 2: rank 0 holds positions 0-1 and 6-7, rank 1 2-3 and 4-5.
  const Tensor tokens = arange(0, 9, 1, DType::i64).view({1, 9});
  const LocalTokens r0 = local_tokens(tokens, 2, 0), r1 = local_tokens(tokens, 2, 1);
  EXPECT_EQ(r0.inputs.contiguous().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(r0.labels.contiguous().to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 7, 8}));
  EXPECT_EQ(r1.inputs.contiguous().to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(r1.labels.contiguous().to_vector<int64_t>(), (std::vector<int64_t>{3, 4, 5, 6}));
  EXPECT_EQ(local_tokens(tokens, 1, 0).inputs.size(1), 8);
}

}  // namespace
}  // namespace tidal::parallel
