// LoRA on several ranks (docs/finetuning.md): data parallel, ZeRO-1 and ZeRO-2 train the adapters of
// one process accumulating the same micro-batches, with the frozen base neither reduced nor sharded.
// (Context and expert parallel: context_parallel_train_test.cpp, expert_parallel_test.cpp.)
#include <gtest/gtest.h>

#include "tests/dist/train_runs.h"

namespace tidal::train {
namespace {

const std::vector<std::string> kLora = {"--lora-target-modules", "q_proj", "v_proj", "gate_proj", "--lora-r", "4"};

TEST(LoraDataParallel, OneMicroBatchPerRankIsBitwiseOneProcess) {
  compare("tiny-llama", 1, 0.0, {}, -1, kLora);
  compare("tiny-llama", 1, 0.0, {"--use-distributed-optimizer"}, -1, kLora);
  compare("tiny-gpt2", 1, 0.0, {"--use-distributed-optimizer"}, -1, {"--lora-target-modules", "all-linear"});
}

TEST(LoraDataParallel, ZeRO2AndAccumulationAgreeToSummationOrder) {
  compare("tiny-llama", 2, 1e-5, {"--data-parallel-sharding-strategy", "optim_grads"}, -1, kLora);
  compare("tiny-llama", 2, 1e-5, {"--data-parallel-sharding-strategy", "optim_grads", "--overlap-grad-reduce"}, -1,
          kLora);
}

TEST(LoraDataParallel, Bf16OneMicroBatchPerRankIsBitwiseOneProcess) {
  std::vector<std::string> bf16 = kLora;
  bf16.push_back("--bf16");
  compare("tiny-llama", 1, 0.0, {}, -1, bf16);
  compare("tiny-llama", 1, 0.0, {"--use-distributed-optimizer"}, -1, bf16);
}

}  // namespace
}  // namespace tidal::train
