// tidal plan's search over expert and context parallelism (tidal/plan/candidates.h): E and C are
// candidates when not given (MoE models; dense models with flash attention), a given one is kept, and
// under a budget only they fit, the search picks them.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "tidal/plan/auto_memory.h"
#include "tidal/plan/candidates.h"
#include "tidal/plan/cost_model.h"
#include "tidal/plan/device_profile.h"
#include "tidal/plan/dry_run.h"
#include "tidal/plan/report.h"
#include "tidal/plan/search.h"

namespace tidal::train {
namespace {

// tiny-qwen3-moe with large experts (8 of 1024 wide in layer 1): the experts are most of the bytes.
const std::vector<std::string> kMoe = {"--model", "tiny-qwen3-moe",        "--mock-data", "--seq-length",
                                       "64",      "--micro-batch-size",    "2",           "--global-batch-size",
                                       "8",       "--moe-ffn-hidden-size", "1024",        "--train-iters",
                                       "2"};
// tiny-llama at 4096 tokens: the activations are most of the bytes.
const std::vector<std::string> kLong = {
    "--model", "tiny-llama",         "--mock-data", "--seq-length",        "4096", "--max-position-embeddings",
    "4096",    "--micro-batch-size", "1",           "--global-batch-size", "4",    "--train-iters",
    "2"};

train::TrainArgs args(std::vector<std::string> flags, const std::vector<std::string>& more = {}) {
  flags.insert(flags.end(), more.begin(), more.end());
  return train::parse_train_args(flags).on(4);  // the four ranks planned for
}

plan::SearchOptions options(int64_t budget) {
  plan::SearchOptions o;
  o.budget = budget;
  o.profile = plan::load_device_profile("a100");
  return o;
}

std::set<std::pair<int, int64_t>> parallel_sizes(const std::vector<plan::CandidateConfig>& all) {
  std::set<std::pair<int, int64_t>> out;
  for (const plan::CandidateConfig& c : all) out.insert({c.args.parallel.expert, c.args.parallel.context});
  return out;
}

TEST(PlanParallel, TheCandidatesHoldTheSizesTidalTrainRuns) {
  // MoE: E divides the 8 experts and the 4 ranks, C the ranks (2C the 64 tokens), E x C the ranks
  // (the search's grid; tidal train runs E 4 x C 2 on 4 ranks too).
  const std::vector<plan::CandidateConfig> moe = plan::enumerate_candidates(args(kMoe));
  EXPECT_EQ(parallel_sizes(moe), (std::set<std::pair<int, int64_t>>{{1, 1}, {1, 2}, {1, 4}, {2, 1}, {2, 2}, {4, 1}}));
  bool sharded_experts = false;  // expert parallelism runs with every sharding strategy
  for (const plan::CandidateConfig& c : moe) {
    if (c.args.parallel.expert == 1) continue;
    sharded_experts |= c.args.parallel.sharding != parallel::ShardingStrategy::no_shard;
    EXPECT_NE(c.flags.find("--expert-model-parallel-size"), std::string::npos) << c.flags;
  }
  EXPECT_TRUE(sharded_experts);
  // Dense: C divides the 4 ranks and 2C the 4096 tokens, with either attention kernel (eager gathers K/V).
  const std::vector<plan::CandidateConfig> dense = plan::enumerate_candidates(args(kLong, {"--attention", "eager"}));
  EXPECT_EQ(parallel_sizes(dense), (std::set<std::pair<int, int64_t>>{{1, 1}, {1, 2}, {1, 4}}));
  std::set<std::string> cp_kernels;
  for (const plan::CandidateConfig& c : dense)
    if (c.args.parallel.context > 1) cp_kernels.insert(name(c.args.attention));
  EXPECT_EQ(cp_kernels, (std::set<std::string>{"eager", "flash"}));
  // Given sizes are kept; 2C must divide the sequence.
  EXPECT_EQ(parallel_sizes(plan::enumerate_candidates(args(kLong, {"--context-parallel-size", "2"}))),
            (std::set<std::pair<int, int64_t>>{{1, 2}}));
  EXPECT_EQ(parallel_sizes(plan::enumerate_candidates(args(kMoe, {"--expert-model-parallel-size", "2"}))),
            (std::set<std::pair<int, int64_t>>{{2, 1}, {2, 2}}));
  std::vector<std::string> odd = kLong;
  odd[4] = "4092";
  EXPECT_EQ(parallel_sizes(plan::enumerate_candidates(args(odd))),
            (std::set<std::pair<int, int64_t>>{{1, 1}, {1, 2}}));  // 4092 = 2 x 2 x 1023
}

// As given a rank holds every expert (28 MB); the smallest run without expert parallelism needs 15 MB,
// with E = 2 8 MB: under 10 MiB only expert parallelism fits.
TEST(PlanParallel, OnlyExpertParallelismFitsAndIsChosen) {
  const plan::PlanSearch s = plan::search_plans(args(kMoe), options(10 << 20));
  ASSERT_GE(s.chosen, 0) << s.nothing_fits;
  const plan::PlanCandidate& c = s.candidates[size_t(s.chosen)];
  EXPECT_GT(c.args.parallel.expert, 1) << c.flags;
  EXPECT_TRUE(c.exact) << c.flags;
  EXPECT_LE(c.device_peak, s.target);
  EXPECT_NE(c.why.find("experts a rank, all-to-all"), std::string::npos) << c.why;
  EXPECT_GT(c.time.all_to_all_s, 0);
  const nlohmann::json j = plan::plan_search_json(s, options(10 << 20));
  EXPECT_EQ(j["chosen"]["expert_model_parallel_size"], c.args.parallel.expert);
  EXPECT_EQ(j["chosen"]["context_parallel_size"], 1);
}

// At 4096 tokens the smallest run on whole sequences needs 18 MB, with C = 2 11.5 MB and C = 4 6 MB.
TEST(PlanParallel, OnlyContextParallelismFitsAndIsChosen) {
  const plan::PlanSearch s = plan::search_plans(args(kLong), options(16 << 20));
  ASSERT_GE(s.chosen, 0) << s.nothing_fits;
  const plan::PlanCandidate& c = s.candidates[size_t(s.chosen)];
  EXPECT_GT(c.args.parallel.context, 1) << c.flags;
  EXPECT_LE(c.device_peak, s.target);
  EXPECT_NE(c.why.find("tokens a rank, ring exchange"), std::string::npos) << c.why;
  EXPECT_GT(c.time.ring_s, 0);
  EXPECT_LE(c.time.exposed_ring_s, c.time.ring_s);
  const nlohmann::json j = plan::plan_search_json(s, options(16 << 20));
  EXPECT_EQ(j["chosen"]["context_parallel_size"], c.args.parallel.context);
}

// The all-to-all: per MoE layer (tiny-qwen3-moe has one) and micro-batch, the counts and four row
// exchanges of (E-1)/E x tokens x top-k x hidden elements, all exposed. The ring: per layer and
// micro-batch C-1 K/V blocks forward and C exchanges backward (K/V and the f32 dK/dV riding with
// them), hidden behind attention up to its time per block, and the last dK/dV, going home, exposed.
TEST(PlanParallel, TheCostModelTimesTheAllToAllAndTheRing) {
  const plan::DeviceProfile p = plan::load_device_profile("a100");
  const train::TrainArgs moe = args(kMoe, {"--expert-model-parallel-size", "2"});
  const plan::StepTime ep = plan::predict_step_time(plan::dry_run(moe.on(4), 0), moe.on(4), p);
  const double rows = 2.0 * 64 * 2 * 64 * 4;  // tokens x top-k x hidden x f32
  const int64_t accum = 8 / (2 * 4);
  EXPECT_NEAR(ep.all_to_all_s, double(accum) * (4 * rows / 2 / p.collective_bandwidth + 5 * p.collective_latency_s),
              1e-12);
  EXPECT_EQ(ep.ring_s, 0);
  const train::TrainArgs cp = args(kLong, {"--context-parallel-size", "2"});
  const plan::StepTime ring = plan::predict_step_time(plan::dry_run(cp.on(4), 0), cp.on(4), p);
  const models::ModelConfig& m = cp.model;
  const double kv = 2.0 * 1 * 2048 * double(m.kv_heads() * m.head_size());        // one block's K and V
  const double block = kv * 4 / p.collective_bandwidth + p.collective_latency_s;  // f32 K/V, and dK/dV
  const double per = double(4 / 2 / 1 * m.num_hidden_layers);                     // 2 micro-batches a rank, every layer
  // C = 2: forward one K/V block; backward the K/V block, then the dK/dV (the same bytes in f32),
  // then the dK/dV home.
  EXPECT_NEAR(ring.ring_s, per * 4 * block, 1e-12);
  EXPECT_GE(ring.exposed_ring_s, per * block - 1e-12);  // the dK/dV home block
  EXPECT_LE(ring.exposed_ring_s, ring.ring_s);
  EXPECT_EQ(ring.all_to_all_s, 0);
}

// The out-of-memory advice names the planner's choice: expert parallelism where only it fits.
TEST(PlanParallel, TheOutOfMemoryAdviceNamesTheChosenSizes) {
  train::TrainArgs a = args(kMoe);
  a.device_profile = "a100";
  const std::string advice = plan::planner_advice(a, 10 << 20);
  EXPECT_NE(advice.find("tidal plan's choice for 10.00 MiB"), std::string::npos) << advice;
  EXPECT_NE(advice.find("--expert-model-parallel-size"), std::string::npos) << advice;
}

}  // namespace
}  // namespace tidal::train
