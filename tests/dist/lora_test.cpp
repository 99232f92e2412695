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

// ZeRO-3: the adapters sharded as the optimizer's parameters, the frozen base by a sharding of its own that never
// steps; every layer's gather brings both.
TEST(LoraDataParallel, ZeRO3ShardsTheFrozenBaseToo) {
  const std::vector<std::string> zero3 = {"--data-parallel-sharding-strategy", "optim_grads_params"};
  compare("tiny-llama", 1, 0.0, zero3, -1, kLora);
  compare("tiny-gpt2", 2, 1e-5, {"--data-parallel-sharding-strategy", "optim_grads_params", "--overlap-param-gather"},
          -1, {"--lora-target-modules", "all-linear"});
}

TEST(LoraDataParallel, Bf16OneMicroBatchPerRankIsBitwiseOneProcess) {
  std::vector<std::string> bf16 = kLora;
  bf16.push_back("--bf16");
  compare("tiny-llama", 1, 0.0, {}, -1, bf16);
  compare("tiny-llama", 1, 0.0, {"--use-distributed-optimizer"}, -1, bf16);
}

// A LoRA run's checkpoints under `sharding` (every rank's shard of the adapters' states) resume bit for bit on the
// same ranks, and one process resumes from them too (the adapters compared, beside the untouched base).
void expect_resumes_bitwise(const std::vector<std::string>& sharding, const std::string& name) {
  dist::Communicator& world = dist::world();
  auto args = [&](const std::string& save, int64_t iters, const std::string& load, bool sharded) {
    std::vector<std::string> extra = kLora;
    extra.insert(extra.end(), {"--lr-decay-iters", "4"});
    if (!load.empty()) extra.insert(extra.end(), {"--load", load});
    if (sharded) extra.insert(extra.end(), sharding.begin(), sharding.end());
    return args_for(2, 2 * world.size(), save, "tiny-llama", extra, iters);
  };
  const ResumedRuns runs = resume_runs(world, scratch_dir(name, world.size()), args);
  int adapters = 0;
  for (const auto& [name, t] : runs.full) {
    adapters += name.find("lora_") != std::string::npos;
    EXPECT_EQ(max_abs_difference(runs.resumed.at(name), t), 0.0) << "resumed " << name;
    EXPECT_EQ(max_abs_difference(runs.one.at(name), t), 0.0) << "one process " << name;
  }
  EXPECT_EQ(adapters, 2 * 3 * 2);  // 2 layers x (q, v, gate) x (A, B)
}

TEST(LoraDataParallel, ShardedCheckpointsResumeBitwise) {
  expect_resumes_bitwise({"--use-distributed-optimizer"}, "lora_resume");
  expect_resumes_bitwise({"--data-parallel-sharding-strategy", "optim_grads_params"}, "lora_resume_zero3");
}

}  // namespace
}  // namespace tidal::train
