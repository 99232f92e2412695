// The exchanges between ranks in a profile (docs/profiling.md): ring attention's K/V blocks on the
// "cp ring" side lane (the worker thread that carries them while the compute thread works), its
// last, blocking, dK/dV exchange of each layer and the MoE all-to-all as ranges of kind "comm" on the compute lane,
// which the overlap figures do not count as compute. Counted exactly, per profiled step.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/dist/train_runs.h"
#include "tidal/models/config.h"
#include "tidal/train/trainer.h"

namespace tidal::train {
namespace {

namespace fs = std::filesystem;

// Trains 2 steps on this run's ranks with `extra`, profiling step 2 (one micro-batch of 2 per
// data-parallel rank: `global` samples); rank 0's summary.json, or null on the other ranks.
nlohmann::json profiled_step(const std::string& name, const std::string& model, int64_t global,
                             std::vector<std::string> extra) {
  dist::Communicator& world = dist::world();
  const std::string dir = scratch_dir(name, world.size());
  if (world.rank() == 0) fs::remove_all(dir);
  world.barrier();
  extra.insert(extra.end(), {"--profile", dir, "--profile-steps", "2:2"});
  std::FILE* quiet = std::fopen("/dev/null", "w");
  run_training(args_for(2, global, "", model, extra, 2), quiet, world);
  std::fclose(quiet);
  if (world.rank() != 0) return nullptr;  // rank 0 profiles
  std::ifstream in(dir + "/summary.json");
  EXPECT_TRUE(in.good()) << dir;
  return in.good() ? nlohmann::json::parse(in) : nlohmann::json::object();
}

// Calls of the op named `name` of `kind` on the compute lane (0: none).
int64_t op_calls(const nlohmann::json& summary, const std::string& name, const std::string& kind) {
  for (const nlohmann::json& op : summary.value("ops", nlohmann::json::array()))
    if (op.value("name", "") == name && op.value("kind", "") == kind) return op.value("calls", int64_t(0));
  return 0;
}

int64_t stream_tasks(const nlohmann::json& summary, const std::string& stream) {
  for (const nlohmann::json& s : summary.value("streams", nlohmann::json::array()))
    if (s.value("stream", "") == stream) return s.value("tasks", int64_t(0));
  return 0;
}

TEST(ExchangeProfile, RingExchangesAreOnTheirLanes) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  const nlohmann::json s = profiled_step("ring_profile", "tiny-llama", 2, {"--context-parallel-size", "2"});
  if (s.is_null()) return;
  const int64_t layers = models::preset("tiny-llama").num_hidden_layers, c = 2;
  // Per layer: C - 1 K/V blocks forward travel on the worker; backward's C exchanges carry the next
  // K/V block and the previous step's dK/dV on; the last dK/dV, going home, blocks. Without
  // MPI_THREAD_MULTIPLE every exchange blocks.
  const int64_t async = layers * ((c - 1) + c), blocking = layers;
  const int64_t tasks = stream_tasks(s, "cp ring");
  if (tasks > 0) {
    EXPECT_EQ(tasks, async);
    EXPECT_EQ(op_calls(s, "wait", "wait"), async);  // the compute thread takes every block once
    EXPECT_EQ(op_calls(s, "ring exchange", "comm"), blocking);
  } else {
    EXPECT_EQ(op_calls(s, "ring exchange", "comm"), async + blocking);
  }
  EXPECT_GT(s.value("compute_comm_ms", 0.0), 0.0);
}

TEST(ExchangeProfile, AllToAllExchangesAreCommRanges) {
  if (dist::world().size() != 2) GTEST_SKIP() << "runs on two ranks (ctest dist2)";
  const nlohmann::json s =
      profiled_step("all_to_all_profile", "tiny-qwen3-moe", 4, {"--expert-model-parallel-size", "2"});
  if (s.is_null()) return;
  const models::ModelConfig m = models::preset("tiny-qwen3-moe");
  int64_t sparse = 0;
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) sparse += m.is_moe_layer(l);
  // Per MoE layer: the dispatch and the combine, forward and backward.
  EXPECT_EQ(op_calls(s, "all-to-all exchange", "comm"), 4 * sparse);
  EXPECT_EQ(stream_tasks(s, "cp ring"), 0);
}

}  // namespace
}  // namespace tidal::train
