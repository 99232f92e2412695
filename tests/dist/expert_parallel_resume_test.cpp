// A checkpoint of any layout resumes under expert parallelism (checkpoint/rank_state.h): the
// distributed optimizer's per-rank shard files, saved without expert parallelism, give every rank its
// dense shard and its experts' states (optim::assemble_state) as one process's files do. Two runs
// without expert parallelism reach the same state (ZeRO-1 and no_shard are bit for bit one process's),
// one saving shard files, the other one process's files; resumed under E = 2, with and without
// sharding, they train bit for bit alike (tiny-qwen3-moe, and DeepSeek-V4's stacked experts).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/dist/expert_runs.h"
#include "tests/dist/train_runs.h"
#include "tidal/io/safetensors.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

void resume_shard_files_under_expert_parallel(const std::string& model, const std::string& tag) {
  dist::Communicator& world = dist::world();
  const int n = world.size();
  const std::string dir = scratch_dir("ep_resume_shards" + tag, n);
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  auto args = [&](const std::string& save, const std::string& load, std::vector<std::string> flags, int64_t iters) {
    flags.insert(flags.end(), {"--save", save, "--save-interval", "2"});
    if (!load.empty()) flags.insert(flags.end(), {"--load", load});
    TrainArgs a = args_for(2, 2 * n, "", model, flags, iters);
    return a;
  };
  std::FILE* quiet = std::fopen("/dev/null", "w");
  run_training(args(dir + "/shards", "", {"--use-distributed-optimizer"}, 2), quiet, world);
  run_training(args(dir + "/whole", "", {}, 2), quiet, world);
  world.barrier();
  ASSERT_TRUE(fs::exists(dir + "/shards/iter_0000002/optimizer.rank00001-of-00002.safetensors"));
  ASSERT_TRUE(fs::exists(dir + "/whole/iter_0000002/optimizer.safetensors"));
  for (const std::vector<std::string>& layout :
       {std::vector<std::string>{"--expert-model-parallel-size", "2"},
        std::vector<std::string>{"--expert-model-parallel-size", "2", "--data-parallel-sharding-strategy",
                                 "optim_grads"}}) {
    const std::string name = layout.size() == 2 ? "ep" : "ep_zero2";
    const TrainResult from_shards =
        run_training(args(dir + "/" + name + "_s", dir + "/shards", layout, 4), quiet, world);
    const TrainResult from_whole = run_training(args(dir + "/" + name + "_w", dir + "/whole", layout, 4), quiet, world);
    world.barrier();
    ASSERT_EQ(from_shards.losses.size(), 2u) << name;
    EXPECT_EQ(from_shards.losses, from_whole.losses) << name;
    for (const char* file : {"model.safetensors", "optimizer.safetensors"})
      expect_same_tensors(io::load_safetensors(dir + "/" + name + "_s/iter_0000004/" + file).tensors,
                          io::load_safetensors(dir + "/" + name + "_w/iter_0000004/" + file).tensors, 0,
                          name + " " + file);
  }
  std::fclose(quiet);
}

TEST(ExpertParallelResume, ShardFilesSavedWithoutExpertParallelResumeUnderIt) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks";
  resume_shard_files_under_expert_parallel("tiny-qwen3-moe", "");
}

// DeepSeek-V4's stacked experts (nn/slab.h): from the shard files each rank takes its rows' elements at their place in
// the whole tensors' flat moments; from one process's files it reads only its rows (nn::slab_rows). Both alike.
TEST(ExpertParallelResume, DeepseekV4ShardFilesAndOneProcessFilesResumeAlike) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks";
  resume_shard_files_under_expert_parallel(tiny_deepseek_v4(), "_v4");
}

}  // namespace
}  // namespace tidal::train
