// --moe-expert-capacity-factor under expert parallelism (models/moe.h, docs/distributed.md): each
// rank's capacity is computed from its own tokens before the exchange, as Megatron-LM does, so E ranks
// drop exactly the slots one process accumulating the same micro-batches drops, and train alike.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/dist/train_runs.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/io/safetensors.h"
#include "tidal/models/config.h"

namespace tidal::train {
namespace {

// E ranks against one process: the expert-parallel tolerance (tests/dist/expert_parallel_test.cpp).
constexpr double kWeightTolerance = 5e-5;
constexpr double kLossTolerance = 1e-6;

// Trains with `flags` on `comm`, saving to `save`; returns the run and its log.
Run train_logged(dist::Communicator& comm, dist::Communicator& world, const TrainArgs& args, std::string& log) {
  const std::string path = args.checkpoint.save + ".log";
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::FILE* out = std::fopen(path.c_str(), "w");
  Run run{run_training(args, out, comm), {}};
  std::fclose(out);
  world.barrier();
  run.weights = io::load_safetensors(args.checkpoint.save + "/iter_0000004/model.safetensors").tensors;
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  log = text.str();
  return run;
}

// "moe dropped slots: D of S" of the log's iteration lines.
std::vector<std::string> dropped(const std::string& log) {
  std::vector<std::string> out;
  for (size_t at = log.find("moe dropped slots: "); at != std::string::npos;
       at = log.find("moe dropped slots: ", at + 1))
    out.push_back(log.substr(at, log.find('\n', at) - at));
  return out;
}

void capacity_matches_one_process(const std::vector<std::string>& capacity) {
  dist::Communicator& world = dist::world();
  const int n = world.size();
  const std::string dir = scratch_dir("ep_capacity_" + capacity.back(), n);
  if (world.rank() == 0) std::filesystem::remove_all(dir);
  world.barrier();
  std::vector<std::string> ep_flags = {"--expert-model-parallel-size", std::to_string(n), "--log-interval", "1"};
  ep_flags.insert(ep_flags.end(), capacity.begin(), capacity.end());
  std::vector<std::string> one_flags = {"--log-interval", "1"};
  one_flags.insert(one_flags.end(), capacity.begin(), capacity.end());
  std::string ep_log, one_log;
  const Run ep = train_logged(world, world, args_for(2, 2 * n, dir + "/ep", "tiny-qwen3-moe", ep_flags), ep_log);
  dist::SingleCommunicator single;
  const Run one = train_logged(
      single, world, args_for(2, 2 * n, dir + "/one" + std::to_string(world.rank()), "tiny-qwen3-moe", one_flags),
      one_log);
  expect_same(ep, one, kWeightTolerance, kLossTolerance);
  // The same slots dropped, every step: the global batch's count on both.
  const std::vector<std::string> ep_dropped = dropped(ep_log), one_dropped = dropped(one_log);
  ASSERT_EQ(ep_dropped.size(), 4u) << ep_log;
  EXPECT_EQ(ep_dropped, one_dropped);
  EXPECT_EQ(ep_dropped[0].find("moe dropped slots: 0 of"), std::string::npos) << ep_dropped[0];  // some dropped
  // The slots: 2 x n sequences of 16 tokens, top-2, one MoE layer.
  EXPECT_NE(ep_dropped[0].find(" of " + std::to_string(2 * n * 16 * 2)), std::string::npos) << ep_dropped[0];
}

TEST(ExpertCapacity, ExpertParallelDropsWhatOneProcessDrops) {
  const int n = dist::world().size();
  if (n < 2 || models::preset("tiny-qwen3-moe").num_experts % n != 0) GTEST_SKIP() << n << " ranks";
  capacity_matches_one_process({"--moe-expert-capacity-factor", "0.5"});
  capacity_matches_one_process({"--moe-expert-capacity-factor", "0.5", "--moe-token-drop-policy", "position"});
  // The MoE block recomputed in backward replays the first run's drops.
  capacity_matches_one_process({"--moe-expert-capacity-factor", "0.5", "--recompute-modules", "moe"});
}

}  // namespace
}  // namespace tidal::train
